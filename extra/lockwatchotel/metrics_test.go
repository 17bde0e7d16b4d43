package lockwatchotel_test

import (
	"context"
	"errors"
	"maps"
	"slices"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.uber.org/goleak"

	"github.com/lockwatch/lockwatch/extra/lockwatchotel"
	"github.com/lockwatch/lockwatch/internal/metricstest"
	"github.com/lockwatch/lockwatch/watchdog"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// collect reads every instrument through r and returns them by name; it
// fails t when they are not all in one scope named ScopeName.
func collect(t testing.TB, r sdkmetric.Reader) map[string]metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatalf("Collect = %v, want nil", err)
	}
	got := map[string]metricdata.Metrics{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != lockwatchotel.ScopeName {
			t.Errorf("scope %q, want %q", sm.Scope.Name, lockwatchotel.ScopeName)
		}
		for _, m := range sm.Metrics {
			got[m.Name] = m
		}
	}
	return got
}

// sum returns the one data point of the monotonic cumulative int64 sum
// named name with attributes attrs.
func sum(t testing.TB, ms map[string]metricdata.Metrics, name string, attrs ...attribute.KeyValue) int64 {
	t.Helper()
	s, ok := ms[name].Data.(metricdata.Sum[int64])
	if !ok {
		t.Fatalf("%s: data %T, want metricdata.Sum[int64]", name, ms[name].Data)
	}
	if !s.IsMonotonic || s.Temporality != metricdata.CumulativeTemporality {
		t.Errorf("%s: monotonic %v, temporality %v, want a monotonic cumulative sum", name, s.IsMonotonic, s.Temporality)
	}
	want := attribute.NewSet(attrs...)
	for _, dp := range s.DataPoints {
		if dp.Attributes.Equals(&want) {
			return dp.Value
		}
	}
	t.Fatalf("%s: no data point with attributes %v in %+v", name, want.ToSlice(), s.DataPoints)
	return 0
}

// gauge returns the data points of the gauge named name.
func gauge[N int64 | float64](t testing.TB, ms map[string]metricdata.Metrics, name string) []metricdata.DataPoint[N] {
	t.Helper()
	g, ok := ms[name].Data.(metricdata.Gauge[N])
	if !ok {
		t.Fatalf("%s: data %T, want metricdata.Gauge[%T]", name, ms[name].Data, N(0))
	}
	return g.DataPoints
}

func TestInstrumentMetrics(t *testing.T) {
	var (
		reader     *sdkmetric.ManualReader
		sweepsFrom int64
	)
	instrument := func(wd *watchdog.Watchdog) {
		reader = sdkmetric.NewManualReader()
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
		if err := lockwatchotel.InstrumentMetrics(wd, lockwatchotel.WithMeterProvider(mp)); err != nil {
			t.Fatalf("InstrumentMetrics = %v, want nil", err)
		}
		if err := lockwatchotel.InstrumentMetrics(wd, lockwatchotel.WithMeterProvider(mp)); !errors.Is(err, lockwatchotel.ErrInstrumented) {
			t.Errorf("second InstrumentMetrics = %v, want ErrInstrumented", err)
		}
		sweepsFrom = wd.Stats().Sweeps
	}
	metricstest.Run(t, instrument, func(step string, st watchdog.Stats, elapsed time.Duration) {
		metricstest.CheckStats(t, step, st)
		ms := collect(t, reader)
		for _, tc := range []struct {
			name, unit string
		}{
			{lockwatchotel.MetricTracked, "{lock}"},
			{lockwatchotel.MetricRenewals, "{renewal}"},
			{lockwatchotel.MetricRenewErrors, "{call}"},
			{lockwatchotel.MetricLosses, "{lock}"},
			{lockwatchotel.MetricSweepDuration, "s"},
			{lockwatchotel.MetricHeadroom, "1"},
		} {
			m, ok := ms[tc.name]
			if !ok {
				if tc.name != lockwatchotel.MetricHeadroom || metricstest.WantHeadroom[step] {
					t.Errorf("%s: no %s in %v", step, tc.name, slices.Sorted(maps.Keys(ms)))
				}
				continue
			}
			if m.Unit != tc.unit || m.Description == "" {
				t.Errorf("%s: %s unit %q, description %q, want unit %q and a description", step, tc.name, m.Unit, m.Description, tc.unit)
			}
		}

		tracked := gauge[int64](t, ms, lockwatchotel.MetricTracked)
		if len(tracked) != 1 || tracked[0].Value != int64(st.Tracked) || tracked[0].Attributes.Len() != 0 {
			t.Errorf("%s: %s = %+v, want one point %d without attributes", step, lockwatchotel.MetricTracked, tracked, st.Tracked)
		}
		if got := sum(t, ms, lockwatchotel.MetricRenewals); got != st.Renewals {
			t.Errorf("%s: %s = %d, want %d (Stats().Renewals)", step, lockwatchotel.MetricRenewals, got, st.Renewals)
		}
		if got := sum(t, ms, lockwatchotel.MetricRenewErrors); got != st.RenewErrors {
			t.Errorf("%s: %s = %d, want %d (Stats().RenewErrors)", step, lockwatchotel.MetricRenewErrors, got, st.RenewErrors)
		}
		want := metricstest.WantLosses[step]
		for _, tc := range []struct {
			reason string
			want   int64
		}{
			{watchdog.ReasonGone, want.Gone},
			{watchdog.ReasonTaken, want.Taken},
			{watchdog.ReasonUnreachable, want.Unreachable},
			{watchdog.ReasonMaxHold, want.MaxHold},
			{watchdog.ReasonQuorum, 0},
		} {
			if got := sum(t, ms, lockwatchotel.MetricLosses, attribute.String("reason", tc.reason)); got != tc.want {
				t.Errorf("%s: %s{reason=%s} = %d, want %d", step, lockwatchotel.MetricLosses, tc.reason, got, tc.want)
			}
		}
		if n := len(ms[lockwatchotel.MetricLosses].Data.(metricdata.Sum[int64]).DataPoints); n != 5 {
			t.Errorf("%s: %s has %d data points, want 5 (one per reason)", step, lockwatchotel.MetricLosses, n)
		}

		h, ok := ms[lockwatchotel.MetricSweepDuration].Data.(metricdata.Histogram[float64])
		if !ok || len(h.DataPoints) != 1 {
			t.Fatalf("%s: %s = %+v, want a histogram with one data point", step, lockwatchotel.MetricSweepDuration, ms[lockwatchotel.MetricSweepDuration].Data)
		}
		dp := h.DataPoints[0]
		if wantCount := uint64(st.Sweeps - sweepsFrom); dp.Count != wantCount || dp.Count == 0 {
			t.Errorf("%s: %s count = %d, want %d (sweeps since InstrumentMetrics), more than 0", step, lockwatchotel.MetricSweepDuration, dp.Count, wantCount)
		}
		if dp.Sum < metricstest.Latency.Seconds() || dp.Sum > elapsed.Seconds() {
			t.Errorf("%s: %s sum = %vs, want between %v (a sweep's round trip) and %v (the time since InstrumentMetrics)", step, lockwatchotel.MetricSweepDuration, dp.Sum, metricstest.Latency, elapsed)
		}
		if !slices.Equal(dp.Bounds, lockwatchotel.SweepDurationBuckets) {
			t.Errorf("%s: %s bounds = %v, want %v", step, lockwatchotel.MetricSweepDuration, dp.Bounds, lockwatchotel.SweepDurationBuckets)
		}

		var head []metricdata.DataPoint[float64]
		if _, ok := ms[lockwatchotel.MetricHeadroom]; ok {
			head = gauge[float64](t, ms, lockwatchotel.MetricHeadroom)
		}
		switch {
		case metricstest.WantHeadroom[step] && (len(head) != 1 || head[0].Value <= 0 || head[0].Value > 1):
			t.Errorf("%s: %s = %+v, want one point in (0, 1]", step, lockwatchotel.MetricHeadroom, head)
		case !metricstest.WantHeadroom[step] && len(head) != 0:
			t.Errorf("%s: %s = %+v, want no point: nothing was renewed since the last collection", step, lockwatchotel.MetricHeadroom, head)
		}
	})
}
