package watchdog_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/bsm/redislock"
	"github.com/redis/go-redis/v9"

	"github.com/lockwatch/lockwatch/adapters/bsmredislock"
	"github.com/lockwatch/lockwatch/adapters/goredsync"
	"github.com/lockwatch/lockwatch/registry"
	"github.com/lockwatch/lockwatch/watchdog"
)

// Attach starts renewing what the registry tracks, after checking that the
// linked lock libraries send the scripts lockwatch knows.
func ExampleAttach() {
	m, _ := miniredis.Run() // an in-memory Redis for the example
	defer m.Close()
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer rdb.Close()

	reg := registry.New(bsmredislock.New(), goredsync.New())
	if err := reg.Watch(rdb); err != nil {
		panic(err)
	}
	wd, err := watchdog.Attach(reg, watchdog.WithSchedule("@every 5s"))
	if errors.Is(err, registry.ErrUpstreamChanged) {
		panic("the linked lock library changed its scripts: " + err.Error())
	} else if err != nil {
		panic(err)
	}
	defer wd.Stop()

	ctx := context.Background()
	lock, _ := redislock.New(rdb).Obtain(ctx, "job:42", 10*time.Second, nil)
	defer lock.Release(ctx)

	m.FastForward(8 * time.Second) // most of the TTL has passed
	_ = wd.Sweep(ctx)              // what the next tick does
	fmt.Println("TTL after the renewal:", m.TTL("job:42"))
	fmt.Println("renewals:", wd.Stats().Renewals)
	// Output:
	// TTL after the renewal: 10s
	// renewals: 1
}

// WithOnLost tells the application which locks the watchdog gave up, and
// why, one call at a time on a goroutine of its own.
func ExampleWithOnLost() {
	m, _ := miniredis.Run()
	defer m.Close()
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer rdb.Close()
	reg := registry.New(bsmredislock.New())
	if err := reg.Watch(rdb); err != nil {
		panic(err)
	}
	reported := make(chan struct{})
	wd, err := watchdog.Attach(reg, watchdog.WithOnLost(func(l registry.Lock, err error) {
		fmt.Printf("lost %s: taken by another owner: %v\n", l.Key, errors.Is(err, watchdog.ErrLockTaken))
		close(reported)
	}))
	if err != nil {
		panic(err)
	}
	defer wd.Stop()

	ctx := context.Background()
	if _, err := redislock.New(rdb).Obtain(ctx, "job:42", 10*time.Second, nil); err != nil {
		panic(err)
	}
	m.Set("job:42", "someone else's token") // another process took the key
	_ = wd.Sweep(ctx)
	<-reported
	// Output:
	// lost job:42: taken by another owner: true
}

// Context hands the job a context that ends when its lock is no longer
// held; the cause says why.
func ExampleWatchdog_Context() {
	m, _ := miniredis.Run()
	defer m.Close()
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer rdb.Close()
	reg := registry.New(bsmredislock.New())
	if err := reg.Watch(rdb); err != nil {
		panic(err)
	}
	wd, err := watchdog.Attach(reg)
	if err != nil {
		panic(err)
	}
	defer wd.Stop()

	ctx := context.Background()
	if _, err := redislock.New(rdb).Obtain(ctx, "job:42", 10*time.Second, nil); err != nil {
		panic(err)
	}
	jobCtx, cancel := wd.Context(ctx, "job:42")
	defer cancel()

	m.Del("job:42") // the lock is gone: an operator deleted it, say
	_ = wd.Sweep(ctx)
	<-jobCtx.Done() // the job stops here
	fmt.Println("job stopped:", context.Cause(jobCtx))
	// Output:
	// job stopped: watchdog: lock lost: key gone (deleted or expired)
}

// The debug page mounted next to /debug/pprof on an internal mux, read
// as JSON. A browser gets the same page as an HTML table.
func ExampleWatchdog_Handler() {
	m, _ := miniredis.Run() // in-memory Redis for the example
	defer m.Close()
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer rdb.Close()

	reg := registry.New(bsmredislock.New())
	if err := reg.Watch(rdb); err != nil {
		panic(err)
	}
	wd, err := watchdog.Attach(reg)
	if err != nil {
		panic(err)
	}
	defer wd.Stop()

	// An internal mux, never exposed publicly: the page names lock keys
	// and Redis addresses. (With net/http/pprof on http.DefaultServeMux:
	// http.Handle("/debug/lockwatch", wd.Handler()).)
	mux := http.NewServeMux()
	mux.Handle("/debug/lockwatch", wd.Handler())

	ctx := context.Background()
	locker := redislock.New(rdb)
	for _, key := range []string{"job:42", "invoice:7"} {
		lock, err := locker.Obtain(ctx, key, 10*time.Second, nil)
		if err != nil {
			panic(err)
		}
		defer func() { _ = lock.Release(ctx) }()
	}
	_ = wd.Sweep(ctx)

	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/debug/lockwatch?format=json", nil))
	var page struct {
		Stats struct {
			Renewals int64 `json:"renewals"`
		} `json:"stats"`
		LocksTotal int `json:"locks_total"`
		LocksShown int `json:"locks_shown"`
		Locks      []struct {
			Key      string `json:"key"`
			Source   string `json:"source"`
			TTL      string `json:"ttl"`
			Renewals int64  `json:"renewals"`
		} `json:"locks"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &page); err != nil {
		panic(err)
	}
	fmt.Println(rec.Code, rec.Header().Get("Content-Type"))
	fmt.Printf("%d locks, %d shown, %d renewals\n", page.LocksTotal, page.LocksShown, page.Stats.Renewals)
	for _, l := range page.Locks {
		fmt.Println(l.Key, l.Source, l.TTL, "renewals:", l.Renewals)
	}
	// Output:
	// 200 application/json
	// 2 locks, 2 shown, 2 renewals
	// invoice:7 redislock 10s renewals: 1
	// job:42 redislock 10s renewals: 1
}
