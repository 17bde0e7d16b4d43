package registry_test

import (
	"context"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/bsm/redislock"
	"github.com/redis/go-redis/v9"

	"github.com/lockwatch/lockwatch/adapters/bsmredislock"
	"github.com/lockwatch/lockwatch/adapters/goredsync"
	"github.com/lockwatch/lockwatch/registry"
)

// A registry learns the locks this process holds from the commands of the
// clients it watches; business code does not change.
func ExampleNew() {
	m, _ := miniredis.Run() // an in-memory Redis for the example
	defer m.Close()
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer rdb.Close()

	reg := registry.New(bsmredislock.New(), goredsync.New())
	if err := reg.Watch(rdb); err != nil { // before rdb is used
		panic(err)
	}

	ctx := context.Background()
	lock, err := redislock.New(rdb).Obtain(ctx, "job:42", 10*time.Second, nil)
	if err != nil {
		panic(err)
	}
	for _, l := range reg.Locks() {
		fmt.Printf("tracked: %s (%s, TTL %v)\n", l.Key, l.Source, l.TTL)
	}
	_ = lock.Release(ctx)
	fmt.Println("after release:", reg.Len(), "locks")
	// Output:
	// tracked: job:42 (redislock, TTL 10s)
	// after release: 0 locks
}

// Subscribe follows every change to the table.
func ExampleRegistry_Subscribe() {
	m, _ := miniredis.Run()
	defer m.Close()
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer rdb.Close()
	reg := registry.New(bsmredislock.New())
	if err := reg.Watch(rdb); err != nil {
		panic(err)
	}
	cancel := reg.Subscribe(func(ev registry.Event) {
		fmt.Println(ev.Kind, ev.Lock.Key, ev.Lock.TTL)
	})
	defer cancel()

	ctx := context.Background()
	lock, _ := redislock.New(rdb).Obtain(ctx, "job:7", 5*time.Second, nil)
	_ = lock.Refresh(ctx, 20*time.Second, nil)
	_ = lock.Release(ctx)
	// Output:
	// obtained job:7 5s
	// refreshed job:7 20s
	// released job:7 20s
}
