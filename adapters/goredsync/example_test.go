package goredsync_test

import (
	"context"
	"fmt"

	"github.com/alicebob/miniredis/v2"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/lockwatch/lockwatch/adapters/goredsync"
	"github.com/lockwatch/lockwatch/registry"
	"github.com/lockwatch/lockwatch/watchdog"
)

// The adapter teaches the registry redsync's acquire (a SET NX sent by
// redsync, told from the application's own by the call stack) and its
// scripts: a mutex locked through a go-redis v9 pool on a watched client
// is tracked and renewed, and its unlock untracks it. Sweep renews now
// instead of waiting for the schedule.
func Example() {
	m, _ := miniredis.Run() // in-memory Redis for the example
	defer m.Close()
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer rdb.Close()

	reg := registry.New(goredsync.New())
	if err := reg.Watch(rdb); err != nil {
		panic(err)
	}
	wd, err := watchdog.Attach(reg) // runs the adapter's probe first
	if err != nil {
		panic(err) // errors.Is(err, registry.ErrUpstreamChanged): redsync changed its scripts
	}
	defer wd.Stop()

	// Business code: redsync as usual, with its default expiry of 8s.
	ctx := context.Background()
	mutex := redsync.New(goredis.NewPool(rdb)).NewMutex("invoice:7")
	if err := mutex.LockContext(ctx); err != nil {
		panic(err)
	}

	_ = wd.Sweep(ctx)
	for _, l := range reg.Locks() {
		fmt.Println(l.Key, l.Source, l.TTL, "renewals:", l.Renewals)
	}

	if ok, err := mutex.UnlockContext(ctx); !ok || err != nil {
		panic(fmt.Sprint("unlock: ", ok, err))
	}
	fmt.Println("tracked after unlock:", len(reg.Locks()))
	// Output:
	// invoice:7 redsync 8s renewals: 1
	// tracked after unlock: 0
}
