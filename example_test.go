package lockwatch_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/lockwatch/lockwatch/adapters/bsmredislock"
	"github.com/lockwatch/lockwatch/adapters/goredsync"
	"github.com/lockwatch/lockwatch/registry"
	"github.com/lockwatch/lockwatch/watchdog"
)

// The three start-up lines, then business code that does not know about
// lockwatch. Sweep renews now instead of waiting for the schedule.
func Example() {
	m, _ := miniredis.Run() // in-memory Redis for the example
	defer m.Close()
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer rdb.Close()

	reg := registry.New(bsmredislock.New(), goredsync.New())
	if err := reg.Watch(rdb); err != nil {
		panic(err)
	}
	wd, err := watchdog.Attach(reg)
	if errors.Is(err, registry.ErrUpstreamChanged) {
		panic("the linked lock library changed its scripts: " + err.Error())
	} else if err != nil {
		panic(err)
	}
	defer wd.Stop()

	ctx := context.Background()
	lock, err := redislock.New(rdb).Obtain(ctx, "job:42", 10*time.Second, nil)
	if err != nil {
		panic(err)
	}
	mutex := redsync.New(goredis.NewPool(rdb)).NewMutex("invoice:7")
	if err := mutex.LockContext(ctx); err != nil {
		panic(err)
	}

	_ = wd.Sweep(ctx)
	for _, l := range reg.Locks() {
		if l.Key == "job:42" {
			fmt.Println(l.Key, l.Source, l.TTL, "renewals:", l.Renewals)
		}
	}
	for _, l := range reg.Locks() {
		if l.Key == "invoice:7" {
			fmt.Println(l.Key, l.Source, l.TTL, "renewals:", l.Renewals)
		}
	}

	_ = lock.Release(ctx)
	_, _ = mutex.UnlockContext(ctx)
	fmt.Println("tracked after release:", len(reg.Locks()))
	// Output:
	// job:42 redislock 10s renewals: 1
	// invoice:7 redsync 8s renewals: 1
	// tracked after release: 0
}

// OnLost hears about locks the watchdog can no longer keep: here another
// process overwrote the key. OnLost runs on a goroutine of its own, so the
// example waits for it.
func Example_onLost() {
	m, _ := miniredis.Run()
	defer m.Close()
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer rdb.Close()

	reg := registry.New(bsmredislock.New())
	_ = reg.Watch(rdb)
	reported := make(chan struct{})
	wd, err := watchdog.Attach(reg, watchdog.WithOnLost(func(l registry.Lock, err error) {
		// OnLost runs on a goroutine of its own, after the lock is untracked.
		fmt.Println("lost", l.Key, "taken:", errors.Is(err, watchdog.ErrLockTaken))
		close(reported)
	}))
	if err != nil {
		panic(err)
	}
	defer wd.Stop()

	ctx := context.Background()
	if _, err := redislock.Obtain(ctx, rdb, "job:43", time.Minute, nil); err != nil {
		panic(err)
	}
	m.Set("job:43", "someone else") // another owner's value
	_ = wd.Sweep(ctx)
	<-reported
	fmt.Println("tracked:", len(reg.Locks()), "value:", must(m.Get("job:43")))
	// Output:
	// lost job:43 taken: true
	// tracked: 0 value: someone else
}

func must(s string, err error) string {
	if err != nil {
		panic(err)
	}
	return s
}
