// Command lockwatchconsumer is an application as a user of lockwatch
// writes it, built by .ci/consumer.sh from released modules: the README's
// start-up with both adapters on an embedded miniredis, a redislock lock
// and a redsync mutex, the watchdog's metrics through Prometheus
// (lockwatchprom) and OpenTelemetry (lockwatchotel). It exits 0 when both
// report the renewals the watchdog made.
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/lockwatch/lockwatch/adapters/bsmredislock"
	"github.com/lockwatch/lockwatch/adapters/goredsync"
	"github.com/lockwatch/lockwatch/extra/lockwatchotel"
	"github.com/lockwatch/lockwatch/extra/lockwatchprom"
	"github.com/lockwatch/lockwatch/registry"
	"github.com/lockwatch/lockwatch/watchdog"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "lockwatchconsumer:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx := context.Background()
	m, err := miniredis.Run()
	if err != nil {
		return err
	}
	defer m.Close()
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer rdb.Close()

	// Start-up, as the README shows it.
	reg := registry.New(bsmredislock.New(), goredsync.New())
	if err := reg.Watch(rdb); err != nil {
		return err
	}
	wd, err := watchdog.Attach(reg)
	if err != nil {
		return err
	}
	defer wd.Stop()

	promReg := prometheus.NewRegistry()
	if err := promReg.Register(lockwatchprom.NewCollector("lockwatch", "", wd)); err != nil {
		return err
	}
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(ctx)
	if err := lockwatchotel.InstrumentMetrics(wd, lockwatchotel.WithMeterProvider(mp)); err != nil {
		return err
	}

	// Unchanged business code.
	lock, err := redislock.New(rdb).Obtain(ctx, "consumer:report", time.Minute, nil)
	if err != nil {
		return err
	}
	defer lock.Release(ctx)
	mutex := redsync.New(goredis.NewPool(rdb)).NewMutex("consumer:invoice")
	if err := mutex.LockContext(ctx); err != nil {
		return err
	}
	defer mutex.UnlockContext(ctx)

	if n := len(reg.Locks()); n != 2 {
		return fmt.Errorf("the registry tracks %d locks, want 2", n)
	}
	if err := wd.Sweep(ctx); err != nil { // renew now rather than at the next tick
		return err
	}
	want := wd.Stats().Renewals
	if want < 2 {
		return fmt.Errorf("Stats().Renewals = %d after a sweep, want 2 or more", want)
	}

	var fromProm float64
	mfs, err := promReg.Gather()
	if err != nil {
		return err
	}
	for _, mf := range mfs {
		if mf.GetName() == "lockwatch_renewals_total" {
			fromProm = mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		return err
	}
	var fromOtel int64
	for _, sm := range rm.ScopeMetrics {
		for _, md := range sm.Metrics {
			if s, ok := md.Data.(metricdata.Sum[int64]); ok && md.Name == lockwatchotel.MetricRenewals {
				fromOtel = s.DataPoints[0].Value
			}
		}
	}
	if fromProm != float64(want) || fromOtel != want {
		return fmt.Errorf("renewals: lockwatch_renewals_total %v, %s %d; want %d (Stats)", fromProm, lockwatchotel.MetricRenewals, fromOtel, want)
	}
	fmt.Printf("lockwatchconsumer: 2 locks tracked, %d renewals seen by lockwatchprom and lockwatchotel\n", want)
	return nil
}
