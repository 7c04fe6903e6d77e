// Command ratelimit shows several HTTP worker processes enforcing one rate
// limit per client with ratelimit.Limiter (GCRA) over a map in shared
// memory, with no network hop to a Redis or a coordinator, and checks the
// limit held. See package demo for what it does, its flags and its
// verdict. The same program on Redis or Redis Cluster is built from the
// redis module (which the core module does not depend on):
//
//	go run ./examples/ratelimit
//	go run ./examples/ratelimit -local       # the broken design: FAIL
//	cd redis && go run ./examples/ratelimit -backend redis -redis 127.0.0.1:6379
//	cd redis && go run ./examples/ratelimit -redis-cluster 127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002
package main

import (
	"os"

	"github.com/shmarena/shmarena/examples/ratelimit/demo"
)

func main() { os.Exit(demo.Main(os.Args[1:])) }
