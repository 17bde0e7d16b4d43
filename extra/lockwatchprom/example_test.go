package lockwatchprom_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strconv"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/bsm/redislock"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"github.com/lockwatch/lockwatch/adapters/bsmredislock"
	"github.com/lockwatch/lockwatch/extra/lockwatchprom"
	"github.com/lockwatch/lockwatch/registry"
	"github.com/lockwatch/lockwatch/watchdog"
)

// An application registers one collector per watchdog, after Attach, and
// serves the registry on /metrics. Here a recorder stands for the scrape.
func ExampleNewCollector() {
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

	metrics := prometheus.NewRegistry()
	metrics.MustRegister(lockwatchprom.NewCollector("lockwatch", "", wd))
	handler := promhttp.HandlerFor(metrics, promhttp.HandlerOpts{}) // http.Handle("/metrics", handler)

	ctx := context.Background()
	if _, err := redislock.Obtain(ctx, rdb, "job:42", time.Hour, nil); err != nil {
		panic(err)
	}
	_ = wd.Sweep(ctx) // renew now rather than at the next tick

	scrape := httptest.NewRecorder()
	handler.ServeHTTP(scrape, httptest.NewRequest("GET", "/metrics", nil))
	for _, line := range strings.Split(scrape.Body.String(), "\n") {
		switch {
		case line == "", strings.HasPrefix(line, "#"),
			strings.HasPrefix(line, "lockwatch_sweep_duration_seconds_bucket"),
			strings.HasPrefix(line, "lockwatch_sweep_duration_seconds_sum"),
			strings.HasPrefix(line, "lockwatch_headroom_ratio_bucket"):
		case strings.HasPrefix(line, "lockwatch_headroom_ratio_sum "):
			v, _ := strconv.ParseFloat(strings.Fields(line)[1], 64)
			fmt.Printf("lockwatch_headroom_ratio_sum %.2f\n", v) // about 1: renewed at once
		case strings.HasPrefix(line, "lockwatch_lateness_seconds "):
			v, _ := strconv.ParseFloat(strings.Fields(line)[1], 64)
			fmt.Println("lockwatch_lateness_seconds >= 0:", v >= 0) // a measurement of the moment
		default:
			fmt.Println(strings.Replace(line, m.Addr(), "miniredis", 1))
		}
	}
	// Output:
	// lockwatch_deadlines_missed_total{endpoint="miniredis"} 0
	// lockwatch_endpoint_down{endpoint="miniredis"} 0
	// lockwatch_headroom_ratio_sum 1.00
	// lockwatch_headroom_ratio_count 1
	// lockwatch_hedges_total{endpoint="miniredis"} 0
	// lockwatch_lateness_seconds >= 0: true
	// lockwatch_locks_tracked 1
	// lockwatch_losses_total{reason="gone"} 0
	// lockwatch_losses_total{reason="max_hold"} 0
	// lockwatch_losses_total{reason="quorum"} 0
	// lockwatch_losses_total{reason="taken"} 0
	// lockwatch_losses_total{reason="unreachable"} 0
	// lockwatch_renew_errors_total 0
	// lockwatch_renewals_total 1
	// lockwatch_spare_calls_total{endpoint="miniredis"} 0
	// lockwatch_sweep_duration_seconds_count 1
	// lockwatch_told_late_total 0
	// lockwatch_unconfirmed_total 0
}
