package bsmredislock_test

import (
	"context"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/bsm/redislock"
	"github.com/redis/go-redis/v9"

	"github.com/lockwatch/lockwatch/adapters/bsmredislock"
	"github.com/lockwatch/lockwatch/registry"
	"github.com/lockwatch/lockwatch/watchdog"
)

// The adapter teaches the registry redislock's scripts: a lock obtained
// through redislock on a watched client is tracked and renewed, and its
// release untracks it. Sweep renews now instead of waiting for the
// schedule.
func Example() {
	m, _ := miniredis.Run() // in-memory Redis for the example
	defer m.Close()
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer rdb.Close()

	reg := registry.New(bsmredislock.New())
	if err := reg.Watch(rdb); err != nil {
		panic(err)
	}
	wd, err := watchdog.Attach(reg) // runs the adapter's probe first
	if err != nil {
		panic(err) // errors.Is(err, registry.ErrUpstreamChanged): redislock changed its scripts
	}
	defer wd.Stop()

	// Business code: redislock as usual.
	ctx := context.Background()
	lock, err := redislock.New(rdb).Obtain(ctx, "report:2026-11", 30*time.Second, nil)
	if err != nil {
		panic(err)
	}

	_ = wd.Sweep(ctx)
	for _, l := range reg.Locks() {
		fmt.Println(l.Key, l.Source, l.TTL, "renewals:", l.Renewals)
	}

	if err := lock.Release(ctx); err != nil {
		panic(err)
	}
	fmt.Println("tracked after release:", len(reg.Locks()))
	// Output:
	// report:2026-11 redislock 30s renewals: 1
	// tracked after release: 0
}
