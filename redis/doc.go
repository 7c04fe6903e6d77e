// Package redis runs shmarena's KeyValue and Queue interfaces on Redis
// (or Valkey) through go-redis v9's UniversalClient, so that one
// constructor serves a single server, Sentinel and Redis Cluster, and code
// written against shmarena.KeyValue and shmarena.Queue moves from one host
// to several by changing its constructor:
//
//	kv := shmarena.NewKeyValue(m)                 // one host, shared memory
//	kv := redis.NewMap(client, "sessions:")       // many hosts, Redis
//
// A Map keeps each key in a Redis string under a prefix, so one Redis
// serves several maps; its keys are not pinned to one hash slot, so a map
// spreads over a cluster. A Queue keeps one Redis Stream per topic and its
// groups are stream consumer groups; all streams of one queue share a hash
// tag, so a queue lives on one master. Map also implements
// ratelimit.Evaluator: a ratelimit.Limiter over it makes each decision
// in one Lua script (go-redis/redis_rate's), on the server's clock.
//
// Errors from the network or the server are returned wrapped
// (errors.Is/As reach go-redis's errors): an operation during a Redis
// restart or failover fails, never returning a wrong answer, and the same
// client works again once the server is back. What differs from shared
// memory is declared in Capabilities; docs/redis.md has the table.
package redis
