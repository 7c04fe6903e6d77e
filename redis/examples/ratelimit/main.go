// Command ratelimit is examples/ratelimit (package
// github.com/shmarena/shmarena/examples/ratelimit/demo) with the Redis
// backend added: the same workers, load and verdict, with the limiter's
// store a Redis server or a Redis Cluster instead of shared memory. Only
// the store's constructor differs (see redisBackend). It lives in the
// redis module because the core module does not depend on go-redis.
//
//	go run ./examples/ratelimit -backend redis -redis 127.0.0.1:6379
//	go run ./examples/ratelimit -redis-cluster 127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002
//	go run ./examples/ratelimit                  # shared memory, as in the core module
package main

import (
	"context"
	"fmt"
	"os"
	"strings"

	goredis "github.com/redis/go-redis/v9"
	"github.com/shmarena/shmarena"
	"github.com/shmarena/shmarena/examples/ratelimit/demo"
	"github.com/shmarena/shmarena/redis"
)

func main() { os.Exit(demo.Main(os.Args[1:], redisBackend)) }

// redisBackend keeps the run's keys under the supervisor's prefix on the
// server (-redis) or cluster (-redis-cluster); the supervisor clears them
// at the end unless -keep.
var redisBackend = demo.Backend{Name: "redis", Open: func(c *demo.Config, supervisor bool) (shmarena.KeyValue, func() error, error) {
	var client goredis.UniversalClient
	where := c.Redis
	if c.RedisCluster != "" {
		client = goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: strings.Split(c.RedisCluster, ",")})
		where = "cluster " + c.RedisCluster
	} else {
		client = goredis.NewClient(&goredis.Options{Addr: c.Redis})
	}
	if err := client.Ping(context.Background()).Err(); err != nil {
		_ = client.Close()
		return nil, nil, fmt.Errorf("redis %s: %w", where, err)
	}
	m := redis.NewMap(client, c.Prefix)
	release := func() error {
		if supervisor && !c.Keep {
			if err := m.Clear(context.Background()); err != nil {
				_ = client.Close()
				return err
			}
		}
		return client.Close()
	}
	if supervisor {
		fmt.Printf("redis %s, keys under %q\n", where, c.Prefix)
	}
	return m, release, nil
}}
