package watchdog_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/bsm/redislock"
	"github.com/redis/go-redis/v9"

	"github.com/lockwatch/lockwatch/adapters/bsmredislock"
	"github.com/lockwatch/lockwatch/registry"
	"github.com/lockwatch/lockwatch/watchdog"
)

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
