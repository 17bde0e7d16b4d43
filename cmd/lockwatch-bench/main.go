// Command lockwatch-bench measures one renewal sweep of lockwatch side by
// side with the two designs other watchdogs use and with the server's own
// ceiling, on one redis-server, in one run:
//
//   - lockwatch: locks obtained through redislock on a watched client,
//     renewed by the watchdog (driven by Sweep, not by the clock);
//   - per-lock: one goroutine and ticker per lock calling redislock's
//     Refresh, as redislock's README recommends;
//   - redisson-style: 100 keys per owner-checked script call, one call
//     after another, as Redisson's watchdog batches;
//   - ceiling: pipelined single-key EVALSHA of an owner-checked PEXPIRE,
//     from one connection.
//
// For each case it reports, besides times and CPU, each sweep's wall time
// over the Redis CPU time it caused (wall_over_server_cpu).
//
// It starts its own redis-server on a free loopback port unless -redis is
// given. Each case runs in a child process of its own (the same binary), so
// that memory and CPU figures are the case's alone. It also measures:
//
//   - what a watched client adds to commands that are not lock commands;
//   - the memory case (-cases memory, -memory-locks): what lockwatch adds to
//     the heap of a process that obtains, holds and releases redislock
//     locks while sweeps run, against the same process unwatched;
//   - the cluster case (-cluster, -cluster-locks): a sweep of locks spread
//     over a 3-master Redis Cluster it starts on loopback, against the same
//     number on the single server;
//   - with -fault, how one failing chunk affects the others;
//   - when -cases names them (they are not run by default; named alone,
//     they run without the cluster and fault cases unless -cluster or
//     -fault is given):
//     the neighbour case (-neighbour-*): what the application pays for
//     the sweep, its own commands' latency on the watched client with the
//     watchdog attached and stopped in alternating blocks, with go-redis's
//     default pool and with a small one, and an unrelated client's PING;
//     the storm case (-storm-*): short locks obtained in a burst and a
//     third of them released and obtained again in waves, on a client the
//     application also times its own GET/SET on (closed and open loop),
//     with and without lockwatch, for both pools, in rounds (the p99
//     rise is the median of the rounds'): the latency, the locks lost and
//     the watchdog's figures (see storm.go);
//     the clients case (-clients): connections, heap and goroutines per
//     watched client.
//   - -value-bytes pads the lock values of the neighbour and storm cases
//     (4 KB, 64 KB: the renew call carries every value it checks).
//
// Usage:
//
//	go run ./cmd/lockwatch-bench [-full] [-json] [-redis host:port] [-sweeps 3] [-locks 1000,10000] [-fault=false]
//	    [-cases lockwatch,per-lock,redisson-style,ceiling,memory,neighbour,storm,clients] [-memory-locks 20000,100000] [-memory-every 1s]
//	    [-cluster=false] [-cluster-locks 100000]
//	    [-neighbour-locks 100000] [-neighbour-schedule "@every 2s"] [-neighbour-duration 20s] [-neighbour-block 5s]
//	    [-neighbour-interval 1ms] [-clients 300] [-value-bytes 0]
//	    [-storm-locks 20000] [-storm-ttl 1.5s] [-storm-lib redislock|redsync] [-storm-duration 20s] [-storm-wave 3s]
//	    [-storm-poll 500ms] [-storm-rounds 3] [-storm-profile dir]
package main

import (
	"fmt"
	"io"
	"os"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "lockwatch-bench:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout, stderr io.Writer) error {
	cfg, err := parseArgs(args, stderr)
	if err != nil {
		return err
	}
	if cfg.child != "" {
		return runChild(cfg.child, cfg.redis, cfg.n, os.Stdin, stdout)
	}
	return parent(cfg, stdout, stderr)
}
