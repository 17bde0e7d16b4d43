package lockwatchotel_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/bsm/redislock"
	"github.com/redis/go-redis/v9"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/lockwatch/lockwatch/adapters/bsmredislock"
	"github.com/lockwatch/lockwatch/extra/lockwatchotel"
	"github.com/lockwatch/lockwatch/registry"
	"github.com/lockwatch/lockwatch/watchdog"
)

// An application instruments its watchdog once, after Attach. Here a
// ManualReader stands for the exporter (OTLP, Prometheus...) an
// application would give its MeterProvider.
func ExampleInstrumentMetrics() {
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

	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	if err := lockwatchotel.InstrumentMetrics(wd, lockwatchotel.WithMeterProvider(mp)); err != nil {
		panic(err)
	}

	ctx := context.Background()
	if _, err := redislock.Obtain(ctx, rdb, "job:42", time.Hour, nil); err != nil {
		panic(err)
	}
	_ = wd.Sweep(ctx) // renew now rather than at the next tick

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		panic(err)
	}
	var lines []string
	for _, sm := range rm.ScopeMetrics {
		for _, md := range sm.Metrics {
			switch data := md.Data.(type) {
			case metricdata.Gauge[int64]:
				for _, dp := range data.DataPoints {
					if _, ok := dp.Attributes.Value("endpoint"); ok {
						lines = append(lines, fmt.Sprintf("%s{endpoint=miniredis} %d", md.Name, dp.Value))
					} else {
						lines = append(lines, fmt.Sprint(md.Name, " ", dp.Value))
					}
				}
			case metricdata.Sum[int64]:
				for _, dp := range data.DataPoints {
					if reason, ok := dp.Attributes.Value("reason"); ok {
						lines = append(lines, fmt.Sprintf("%s{reason=%s} %d", md.Name, reason.AsString(), dp.Value))
					} else if _, ok := dp.Attributes.Value("endpoint"); ok {
						lines = append(lines, fmt.Sprintf("%s{endpoint=miniredis} %d", md.Name, dp.Value))
					} else {
						lines = append(lines, fmt.Sprint(md.Name, " ", dp.Value))
					}
				}
			case metricdata.Gauge[float64]: // lockwatch.lateness, a measurement of the moment
				lines = append(lines, fmt.Sprintf("%s >= 0: %v", md.Name, data.DataPoints[0].Value >= 0))
			case metricdata.Histogram[float64]:
				dp := data.DataPoints[0]
				line := fmt.Sprint(md.Name, " count ", dp.Count)
				if md.Name == lockwatchotel.MetricHeadroom {
					line += fmt.Sprintf(" sum %.2f", dp.Sum) // about 1: renewed at once
				}
				lines = append(lines, line)
			}
		}
	}
	slices.Sort(lines)
	fmt.Println(strings.Join(lines, "\n"))
	// Output:
	// lockwatch.deadlines.missed{endpoint=miniredis} 0
	// lockwatch.endpoint.down{endpoint=miniredis} 0
	// lockwatch.headroom count 1 sum 1.00
	// lockwatch.hedges{endpoint=miniredis} 0
	// lockwatch.lateness >= 0: true
	// lockwatch.locks.tracked 1
	// lockwatch.losses{reason=gone} 0
	// lockwatch.losses{reason=max_hold} 0
	// lockwatch.losses{reason=quorum} 0
	// lockwatch.losses{reason=taken} 0
	// lockwatch.losses{reason=unreachable} 0
	// lockwatch.renew.errors 0
	// lockwatch.renewals 1
	// lockwatch.spare.calls{endpoint=miniredis} 0
	// lockwatch.sweep.duration count 1
	// lockwatch.told.late 0
	// lockwatch.unconfirmed 0
}
