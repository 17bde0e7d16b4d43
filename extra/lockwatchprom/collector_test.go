package lockwatchprom_test

import (
	"context"
	"maps"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/bsm/redislock"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/lockwatch/lockwatch/adapters/bsmredislock"
	"github.com/lockwatch/lockwatch/extra/lockwatchprom"
	"github.com/lockwatch/lockwatch/registry"
	"github.com/lockwatch/lockwatch/watchdog"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// gather gathers g and returns its families by name.
func gather(t testing.TB, g prometheus.Gatherer) map[string]*dto.MetricFamily {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatalf("Gather = %v, want nil", err)
	}
	got := map[string]*dto.MetricFamily{}
	for _, mf := range mfs {
		got[mf.GetName()] = mf
	}
	return got
}

// family returns the family named name, of type typ; it fails t when
// there is none.
func family(t testing.TB, mfs map[string]*dto.MetricFamily, name string, typ dto.MetricType) *dto.MetricFamily {
	t.Helper()
	mf, ok := mfs[name]
	if !ok {
		t.Fatalf("no %s among %v", name, slices.Sorted(maps.Keys(mfs)))
	}
	if mf.GetType() != typ || mf.GetHelp() == "" {
		t.Errorf("%s: type %v, help %q, want %v and a help text", name, mf.GetType(), mf.GetHelp(), typ)
	}
	return mf
}

// value returns the value of the one gauge or counter of mf.
func value(t testing.TB, mf *dto.MetricFamily) float64 {
	t.Helper()
	if len(mf.GetMetric()) != 1 || len(mf.GetMetric()[0].GetLabel()) != 0 {
		t.Fatalf("%s: %v, want one metric without labels", mf.GetName(), mf.GetMetric())
	}
	m := mf.GetMetric()[0]
	if mf.GetType() == dto.MetricType_COUNTER {
		return m.GetCounter().GetValue()
	}
	return m.GetGauge().GetValue()
}

// exposition returns the text a scrape of g shows, but for
// lockwatch_lateness_seconds.
func exposition(t testing.TB, g prometheus.Gatherer) string {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatalf("Gather = %v, want nil", err)
	}
	var b strings.Builder
	for _, mf := range mfs {
		if strings.HasSuffix(mf.GetName(), "_lateness_seconds") {
			continue // a measurement of the moment: it changes while nothing else does
		}
		if _, err := expfmt.MetricFamilyToText(&b, mf); err != nil {
			t.Fatalf("MetricFamilyToText(%s) = %v", mf.GetName(), err)
		}
	}
	return b.String()
}

func TestCollector(t *testing.T) {
	var (
		reg, other *prometheus.Registry
		sweepsFrom int64
		previous   string
	)
	instrument := func(wd *watchdog.Watchdog) {
		c := lockwatchprom.NewCollector("lockwatch", "", wd)
		reg, other = prometheus.NewRegistry(), prometheus.NewRegistry()
		reg.MustRegister(c)
		other.MustRegister(c) // a second scraper of the same collector
		sweepsFrom = wd.Stats().Sweeps
	}
	runScenario(t, instrument, func(step string, st watchdog.Stats, r renewals, elapsed time.Duration) {
		checkStats(t, step, st, r)

		// A collection changes nothing: two scrapers, one after the
		// other, and a scrape with nothing done since the last one, see
		// the same.
		text := exposition(t, reg)
		if again := exposition(t, other); again != text {
			t.Errorf("%s: a second scraper sees\n%s\nwhere the first saw\n%s", step, again, text)
		}
		if step == stepAgain && text != previous {
			t.Errorf("%s: nothing happened since the previous scrape, but it shows\n%s\nwhere the previous showed\n%s", step, text, previous)
		}
		previous = text

		mfs := gather(t, reg)
		names := slices.Sorted(maps.Keys(mfs))
		want := []string{"lockwatch_deadlines_missed_total", "lockwatch_endpoint_down", "lockwatch_headroom_ratio", "lockwatch_hedges_total",
			"lockwatch_lateness_seconds", "lockwatch_locks_tracked", "lockwatch_losses_total", "lockwatch_renew_errors_total",
			"lockwatch_renewals_total", "lockwatch_spare_calls_total", "lockwatch_sweep_duration_seconds", "lockwatch_told_late_total", "lockwatch_unconfirmed_total"}
		if !slices.Equal(names, want) {
			t.Errorf("%s: families %v, want %v", step, names, want)
		}
		// lockwatch_lateness_seconds is a measurement of the moment
		// (exposition leaves it out): one series without labels, never
		// negative.
		if late := family(t, mfs, "lockwatch_lateness_seconds", dto.MetricType_GAUGE).GetMetric(); len(late) != 1 || len(late[0].GetLabel()) != 0 || late[0].GetGauge().GetValue() < 0 {
			t.Errorf("%s: lockwatch_lateness_seconds = %v, want one series of 0 s or more without labels", step, late)
		}

		if got := value(t, family(t, mfs, "lockwatch_locks_tracked", dto.MetricType_GAUGE)); got != float64(st.Tracked) {
			t.Errorf("%s: lockwatch_locks_tracked = %v, want %d", step, got, st.Tracked)
		}
		if got := value(t, family(t, mfs, "lockwatch_renewals_total", dto.MetricType_COUNTER)); got != float64(st.Renewals) {
			t.Errorf("%s: lockwatch_renewals_total = %v, want %d (Stats().Renewals)", step, got, st.Renewals)
		}
		if got := value(t, family(t, mfs, "lockwatch_renew_errors_total", dto.MetricType_COUNTER)); got != float64(st.RenewErrors) {
			t.Errorf("%s: lockwatch_renew_errors_total = %v, want %d (Stats().RenewErrors)", step, got, st.RenewErrors)
		}

		if got := value(t, family(t, mfs, "lockwatch_unconfirmed_total", dto.MetricType_COUNTER)); got != float64(st.Unconfirmed) {
			t.Errorf("%s: lockwatch_unconfirmed_total = %v, want %d (Stats().Unconfirmed)", step, got, st.Unconfirmed)
		}
		if got := value(t, family(t, mfs, "lockwatch_told_late_total", dto.MetricType_COUNTER)); got != float64(st.ToldLate) {
			t.Errorf("%s: lockwatch_told_late_total = %v, want %d (Stats().ToldLate)", step, got, st.ToldLate)
		}

		losses := map[string]float64{}
		for _, m := range family(t, mfs, "lockwatch_losses_total", dto.MetricType_COUNTER).GetMetric() {
			if l := m.GetLabel(); len(l) != 1 || l[0].GetName() != "reason" {
				t.Errorf("%s: lockwatch_losses_total labels %v, want reason only", step, l)
				continue
			}
			losses[m.GetLabel()[0].GetValue()] = m.GetCounter().GetValue()
		}
		wl := wantLosses[step]
		wantByReason := map[string]float64{
			watchdog.ReasonGone:        float64(wl.Gone),
			watchdog.ReasonTaken:       float64(wl.Taken),
			watchdog.ReasonUnreachable: float64(wl.Unreachable),
			watchdog.ReasonMaxHold:     float64(wl.MaxHold),
			watchdog.ReasonQuorum:      0,
		}
		if len(losses) != len(wantByReason) {
			t.Errorf("%s: lockwatch_losses_total = %v, want %v", step, losses, wantByReason)
		}
		for r, w := range wantByReason {
			if got, ok := losses[r]; !ok || got != w {
				t.Errorf("%s: lockwatch_losses_total{reason=%q} = %v (present %v), want %v", step, r, got, ok, w)
			}
		}

		down := family(t, mfs, "lockwatch_endpoint_down", dto.MetricType_GAUGE).GetMetric()
		wantDown := 0.0
		if step == stepDown {
			wantDown = 1
		}
		if len(down) != 1 || len(down[0].GetLabel()) != 1 || down[0].GetLabel()[0].GetName() != "endpoint" ||
			down[0].GetLabel()[0].GetValue() != scenarioAddr || down[0].GetGauge().GetValue() != wantDown {
			t.Errorf("%s: lockwatch_endpoint_down = %v, want {endpoint=%q} %v", step, down, scenarioAddr, wantDown)
		}

		// The per-endpoint counters: the scenario has one endpoint
		// (checkStats checks it).
		var ep watchdog.EndpointStats
		if len(st.Endpoints) == 1 {
			ep = st.Endpoints[0]
		}
		for _, tc := range []struct {
			name string
			want int64
		}{
			{"lockwatch_deadlines_missed_total", ep.Missed},
			{"lockwatch_hedges_total", ep.Hedges},
			{"lockwatch_spare_calls_total", ep.SpareCalls},
		} {
			ms := family(t, mfs, tc.name, dto.MetricType_COUNTER).GetMetric()
			if len(ms) != 1 || len(ms[0].GetLabel()) != 1 || ms[0].GetLabel()[0].GetName() != "endpoint" ||
				ms[0].GetLabel()[0].GetValue() != scenarioAddr || ms[0].GetCounter().GetValue() != float64(tc.want) {
				t.Errorf("%s: %s = %v, want {endpoint=%q} %d", step, tc.name, ms, scenarioAddr, tc.want)
			}
		}

		hf := family(t, mfs, "lockwatch_sweep_duration_seconds", dto.MetricType_HISTOGRAM)
		h := hf.GetMetric()[0].GetHistogram()
		if wantCount := uint64(st.Sweeps - sweepsFrom); h.GetSampleCount() != wantCount || wantCount == 0 {
			t.Errorf("%s: sweep histogram count = %d, want %d (sweeps since NewCollector), more than 0", step, h.GetSampleCount(), wantCount)
		}
		// The sum is what the watchdog reported of its sweeps (Swept), in
		// seconds. A sweep of a tick takes a round trip (latency) when it
		// renews a lock, and none when every lock is renewed between ticks
		// by the scheduler: which it is depends on the order in which the
		// tick and the scheduler run at one instant, so the sum is compared
		// with the observer's, not bounded below by a round trip.
		if got, want := h.GetSampleSum(), r.swept.Seconds(); math.Abs(got-want) > 1e-6 || got > elapsed.Seconds() {
			t.Errorf("%s: sweep histogram sum = %vs, want %vs (the sweeps' durations as Swept reported them), at most %v (the time since NewCollector)", step, got, want, elapsed)
		}
		if got := bounds(h); !slices.Equal(got, lockwatchprom.SweepDurationBuckets()) {
			t.Errorf("%s: sweep histogram buckets %v, want %v", step, got, lockwatchprom.SweepDurationBuckets())
		}

		// The headroom histogram has every renewal pipeline the watchdog
		// reported since NewCollector.
		hh := family(t, mfs, "lockwatch_headroom_ratio", dto.MetricType_HISTOGRAM).GetMetric()[0].GetHistogram()
		if hh.GetSampleCount() != r.pipelines || math.Abs(hh.GetSampleSum()-r.sum) > 1e-9 {
			t.Errorf("%s: headroom histogram count %d, sum %v, want %d, %v (the pipelines reported)", step, hh.GetSampleCount(), hh.GetSampleSum(), r.pipelines, r.sum)
		}
		if got := bounds(hh); !slices.Equal(got, lockwatchprom.HeadroomBuckets()) {
			t.Errorf("%s: headroom histogram buckets %v, want %v", step, got, lockwatchprom.HeadroomBuckets())
		}
		for _, b := range hh.GetBucket() {
			if b.GetUpperBound() == 0.33 && b.GetCumulativeCount() != r.late {
				t.Errorf("%s: headroom histogram le=0.33 = %d, want %d", step, b.GetCumulativeCount(), r.late)
			}
		}

		if step == stepIdle {
			// Names, help, types and labels as a scrape shows them.
			const exposition = `
# HELP lockwatch_deadlines_missed_total Renewals on the endpoint not confirmed by their lock's deadline, when less than a third of its TTL is left (sent after it, or answered after it): the endpoint falls behind (more locks due than it renews), answers too slowly or does not answer, or the process is too starved to send and read in time. It grows before locks are lost.
# TYPE lockwatch_deadlines_missed_total counter
lockwatch_deadlines_missed_total{endpoint="127.0.0.1:6379"} 0
# HELP lockwatch_endpoint_down 1 while the endpoint's renewals fail (the last renewal pipeline failed and none has succeeded since), else 0.
# TYPE lockwatch_endpoint_down gauge
lockwatch_endpoint_down{endpoint="127.0.0.1:6379"} 0
# HELP lockwatch_hedges_total Renewal calls on the endpoint not answered when their most urgent lock needed an answer; their locks were sent again in smaller calls on other connections.
# TYPE lockwatch_hedges_total counter
lockwatch_hedges_total{endpoint="127.0.0.1:6379"} 0
# HELP lockwatch_locks_tracked Locks the registry tracks.
# TYPE lockwatch_locks_tracked gauge
lockwatch_locks_tracked 0
# HELP lockwatch_losses_total Locks the watchdog gave up, by reason.
# TYPE lockwatch_losses_total counter
lockwatch_losses_total{reason="gone"} 1
lockwatch_losses_total{reason="max_hold"} 1
lockwatch_losses_total{reason="quorum"} 0
lockwatch_losses_total{reason="taken"} 1
lockwatch_losses_total{reason="unreachable"} 0
# HELP lockwatch_spare_calls_total Renewal calls on the endpoint sent on connections of the watchdog's own because the watched client's pool had no connection free while a deadline was at stake: the application holds its whole pool, which is too small for it and its locks.
# TYPE lockwatch_spare_calls_total counter
lockwatch_spare_calls_total{endpoint="127.0.0.1:6379"} 0
# HELP lockwatch_unconfirmed_total Locks whose holders were told they may be lost (Watchdog.Context cancelled with ErrUnconfirmed): no renewal was confirmed in time. An early warning, not a loss: the lock is renewed on, and counted in lockwatch_losses_total only if lost.
# TYPE lockwatch_unconfirmed_total counter
lockwatch_unconfirmed_total 0
`
			if err := testutil.GatherAndCompare(reg, strings.NewReader(exposition), "lockwatch_deadlines_missed_total", "lockwatch_endpoint_down",
				"lockwatch_hedges_total", "lockwatch_locks_tracked", "lockwatch_losses_total", "lockwatch_spare_calls_total", "lockwatch_unconfirmed_total"); err != nil {
				t.Errorf("%s: GatherAndCompare: %v", step, err)
			}
		}
	})
}

// bounds returns the upper bounds of h's buckets.
func bounds(h *dto.Histogram) []float64 {
	var bs []float64
	for _, b := range h.GetBucket() {
		bs = append(bs, b.GetUpperBound())
	}
	return bs
}

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

// describe returns the names of the descriptions c gives, in
// Desc.String's form.
func describe(c prometheus.Collector) []string {
	ch := make(chan *prometheus.Desc, 16)
	c.Describe(ch)
	close(ch)
	var ds []string
	for d := range ch {
		ds = append(ds, d.String())
	}
	return ds
}

func TestCollectorNilWatchdog(t *testing.T) {
	c := lockwatchprom.NewCollector("lockwatch", "", nil)
	if n := len(describe(c)); n != 13 {
		t.Errorf("Describe gave %d descriptions, want 13", n)
	}
	reg := prometheus.NewRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatalf("Register = %v, want nil", err)
	}
	if mfs := gather(t, reg); len(mfs) != 0 {
		t.Errorf("Gather = %v, want nothing from a nil watchdog", mfs)
	}
	if n := testutil.CollectAndCount(c); n != 0 {
		t.Errorf("CollectAndCount = %d, want 0", n)
	}
}

func TestCollectorNames(t *testing.T) {
	wd := newWatchdog(t)
	for _, tc := range []struct {
		namespace, subsystem, prefix string
	}{
		{"lockwatch", "", "lockwatch_"},
		{"app", "locks", "app_locks_"},
		{"", "", ""},
	} {
		reg := prometheus.NewRegistry()
		if err := reg.Register(lockwatchprom.NewCollector(tc.namespace, tc.subsystem, wd)); err != nil {
			t.Fatalf("Register(NewCollector(%q, %q)) = %v, want nil", tc.namespace, tc.subsystem, err)
		}
		var want []string
		for _, n := range []string{"deadlines_missed_total", "endpoint_down", "headroom_ratio", "hedges_total", "lateness_seconds", "locks_tracked",
			"losses_total", "renew_errors_total", "renewals_total", "spare_calls_total", "sweep_duration_seconds", "told_late_total", "unconfirmed_total"} {
			want = append(want, tc.prefix+n)
		}
		if got := slices.Sorted(maps.Keys(gather(t, reg))); !slices.Equal(got, want) {
			t.Errorf("NewCollector(%q, %q) gathers %v, want %v", tc.namespace, tc.subsystem, got, want)
		}
	}
}

// An invalid name makes Register fail, and Collect send errors, without a
// panic. (A namespace such as "my-app" is valid for client_golang releases
// that accept UTF-8 names; invalid UTF-8 is invalid for all.)
func TestCollectorInvalidName(t *testing.T) {
	c := lockwatchprom.NewCollector("\xff", "", newWatchdog(t))
	if err := prometheus.NewRegistry().Register(c); err == nil {
		t.Error(`Register(NewCollector("\xff", "", wd)) = nil, want an error`)
	}
	ch := make(chan prometheus.Metric, 20)
	c.Collect(ch)
	close(ch)
	invalid := 0
	for m := range ch {
		if err := m.Write(&dto.Metric{}); err != nil {
			invalid++
		}
	}
	if invalid == 0 {
		t.Error("Collect sent no invalid metric for an invalid name")
	}
}

// Several watchdogs in one registry: one collector each, told apart by a
// label.
func TestCollectorWrapped(t *testing.T) {
	reg := prometheus.NewRegistry()
	a, b := newWatchdog(t), newWatchdog(t)
	if err := b.Sweep(context.Background()); err != nil {
		t.Fatalf("Sweep = %v, want nil", err)
	}
	for name, wd := range map[string]*watchdog.Watchdog{"a": a, "b": b} {
		r := prometheus.WrapRegistererWith(prometheus.Labels{"watchdog": name}, reg)
		if err := r.Register(lockwatchprom.NewCollector("lockwatch", "", wd)); err != nil {
			t.Fatalf("Register(%s) = %v, want nil", name, err)
		}
	}
	const exposition = `
# HELP lockwatch_renewals_total Locks renewed by the watchdog.
# TYPE lockwatch_renewals_total counter
lockwatch_renewals_total{watchdog="a"} 1
lockwatch_renewals_total{watchdog="b"} 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(exposition), "lockwatch_renewals_total"); err != nil {
		t.Errorf("GatherAndCompare: %v", err)
	}
}
