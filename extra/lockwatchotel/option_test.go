package lockwatchotel_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/bsm/redislock"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/lockwatch/lockwatch/adapters/bsmredislock"
	"github.com/lockwatch/lockwatch/extra/lockwatchotel"
	"github.com/lockwatch/lockwatch/registry"
	"github.com/lockwatch/lockwatch/watchdog"
)

// newWatchdog returns a watchdog on a miniredis of its own (on the wall
// clock, default schedule) that holds one redislock lock renewed once.
func newWatchdog(t testing.TB) *watchdog.Watchdog {
	t.Helper()
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	reg := registry.New(bsmredislock.New())
	if err := reg.Watch(rdb); err != nil {
		t.Fatalf("Watch = %v, want nil", err)
	}
	wd, err := watchdog.Attach(reg)
	if err != nil {
		t.Fatalf("Attach = %v, want nil", err)
	}
	t.Cleanup(wd.Stop)
	ctx := context.Background()
	if _, err := redislock.Obtain(ctx, rdb, "job", time.Minute, nil); err != nil {
		t.Fatalf("Obtain = %v, want nil", err)
	}
	if err := wd.Sweep(ctx); err != nil {
		t.Fatalf("Sweep = %v, want nil", err)
	}
	return wd
}

// failingProvider gives meters whose RegisterCallback fails.
type failingProvider struct{ noop.MeterProvider }

type failingMeter struct{ noop.Meter }

var errRegister = errors.New("register refused")

func (failingProvider) Meter(string, ...metric.MeterOption) metric.Meter { return failingMeter{} }

func (failingMeter) RegisterCallback(metric.Callback, ...metric.Observable) (metric.Registration, error) {
	return nil, errRegister
}

func TestInstrumentMetricsErrors(t *testing.T) {
	if err := lockwatchotel.InstrumentMetrics(nil); !errors.Is(err, lockwatchotel.ErrNilWatchdog) {
		t.Errorf("InstrumentMetrics(nil) = %v, want ErrNilWatchdog", err)
	}
	wd := newWatchdog(t)
	for _, tc := range []struct {
		name string
		opts []lockwatchotel.Option
		want error
	}{
		{"WithMeterProvider(nil)", []lockwatchotel.Option{lockwatchotel.WithMeterProvider(nil)}, lockwatchotel.ErrNilMeterProvider},
		{"RegisterCallback fails", []lockwatchotel.Option{lockwatchotel.WithMeterProvider(failingProvider{})}, errRegister},
	} {
		if err := lockwatchotel.InstrumentMetrics(wd, tc.opts...); !errors.Is(err, tc.want) {
			t.Errorf("InstrumentMetrics(wd, %s) = %v, want %v", tc.name, err, tc.want)
		}
	}
	if err := lockwatchotel.InstrumentMetrics(wd, nil); err == nil {
		t.Error("InstrumentMetrics(wd, nil) = nil, want an error")
	}
	// Nothing was registered by the calls that failed.
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	if err := lockwatchotel.InstrumentMetrics(wd, lockwatchotel.WithMeterProvider(mp)); err != nil {
		t.Fatalf("InstrumentMetrics after failed calls = %v, want nil", err)
	}
	if got := sum(t, collect(t, reader), lockwatchotel.MetricRenewals); got != 1 {
		t.Errorf("%s = %d, want 1", lockwatchotel.MetricRenewals, got)
	}
	if err := lockwatchotel.InstrumentMetrics(wd, lockwatchotel.WithMeterProvider(noop.NewMeterProvider())); !errors.Is(err, lockwatchotel.ErrInstrumented) {
		t.Errorf("InstrumentMetrics again = %v, want ErrInstrumented", err)
	}
}

// The default MeterProvider is the global one.
func TestDefaultMeterProvider(t *testing.T) {
	wd := newWatchdog(t)
	reader := sdkmetric.NewManualReader()
	otel.SetMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	t.Cleanup(func() { otel.SetMeterProvider(noop.NewMeterProvider()) })
	if err := lockwatchotel.InstrumentMetrics(wd); err != nil {
		t.Fatalf("InstrumentMetrics = %v, want nil", err)
	}
	if got := sum(t, collect(t, reader), lockwatchotel.MetricRenewals); got != 1 {
		t.Errorf("%s = %d through the global provider, want 1", lockwatchotel.MetricRenewals, got)
	}
}

// WithAttributes tells apart two watchdogs that report to one provider.
func TestWithAttributes(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	a, b := newWatchdog(t), newWatchdog(t)
	if err := b.Sweep(context.Background()); err != nil {
		t.Fatalf("Sweep = %v, want nil", err)
	}
	for _, tc := range []struct {
		wd   *watchdog.Watchdog
		name string
	}{{a, "a"}, {b, "b"}} {
		err := lockwatchotel.InstrumentMetrics(tc.wd, lockwatchotel.WithMeterProvider(mp),
			lockwatchotel.WithAttributes(attribute.String("watchdog", tc.name)),
			lockwatchotel.WithAttributes(attribute.String("reason", "not a reason"), attribute.String("endpoint", "not an endpoint")))
		if err != nil {
			t.Fatalf("InstrumentMetrics(%s) = %v, want nil", tc.name, err)
		}
	}
	ms := collect(t, reader)
	for _, tc := range []struct {
		name string
		want int64
	}{{"a", 1}, {"b", 2}} {
		attrs := []attribute.KeyValue{attribute.String("watchdog", tc.name), attribute.String("reason", "not a reason"), attribute.String("endpoint", "not an endpoint")}
		if got := sum(t, ms, lockwatchotel.MetricRenewals, attrs...); got != tc.want {
			t.Errorf("%s{watchdog=%s} = %d, want %d", lockwatchotel.MetricRenewals, tc.name, got, tc.want)
		}
		if got := sum(t, ms, lockwatchotel.MetricLosses, attribute.String("watchdog", tc.name), attribute.String("reason", watchdog.ReasonGone), attribute.String("endpoint", "not an endpoint")); got != 0 {
			t.Errorf("%s{watchdog=%s,reason=gone} = %d, want 0", lockwatchotel.MetricLosses, tc.name, got)
		}
		if got := sum(t, ms, lockwatchotel.MetricUnconfirmed, attrs...); got != 0 {
			t.Errorf("%s{watchdog=%s} = %d, want 0", lockwatchotel.MetricUnconfirmed, tc.name, got)
		}
		// The endpoint attribute is the endpoint's own.
		endpoint := map[string]*watchdog.Watchdog{"a": a, "b": b}[tc.name].Stats().Endpoints[0].Endpoint
		for _, name := range []string{lockwatchotel.MetricDeadlinesMissed, lockwatchotel.MetricHedges, lockwatchotel.MetricSpareCalls} {
			if got := sum(t, ms, name, attribute.String("watchdog", tc.name), attribute.String("reason", "not a reason"), attribute.String("endpoint", endpoint)); got != 0 {
				t.Errorf("%s{watchdog=%s,endpoint=%s} = %d, want 0", name, tc.name, endpoint, got)
			}
		}
	}
}
