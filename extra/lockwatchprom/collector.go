package lockwatchprom

import (
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lockwatch/lockwatch/internal/headroom"
	"github.com/lockwatch/lockwatch/registry"
	"github.com/lockwatch/lockwatch/watchdog"
)

// SweepDurationBuckets are the buckets, in seconds, of the sweep duration
// histogram; NewCollector copies them.
var SweepDurationBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}

// reasons are the values of the reason label of the losses counter, in
// this order.
var reasons = [...]string{
	watchdog.ReasonGone,
	watchdog.ReasonTaken,
	watchdog.ReasonUnreachable,
	watchdog.ReasonMaxHold,
	watchdog.ReasonQuorum,
}

// lossCounts returns l's counts in the order of reasons.
func lossCounts(l watchdog.Losses) [len(reasons)]int64 {
	return [...]int64{l.Gone, l.Taken, l.Unreachable, l.MaxHold, l.Quorum}
}

// NewCollector returns a Collector of w's metrics, named with namespace
// and subsystem as prometheus.BuildFQName joins them. With
// NewCollector("lockwatch", "", w):
//
//   - lockwatch_locks_tracked, a gauge: locks the registry tracks.
//   - lockwatch_renewals_total, a counter: locks renewed.
//   - lockwatch_renew_errors_total, a counter: renew script calls that
//     failed or were not answered in time.
//   - lockwatch_losses_total{reason}, a counter: locks given up, by
//     [watchdog.Reason] (gone, taken, unreachable, max_hold, quorum; every
//     reason is collected, 0 included).
//   - lockwatch_sweep_duration_seconds, a histogram
//     ([SweepDurationBuckets]): how long each endpoint's sweep took.
//   - lockwatch_headroom_ratio, a gauge: the least remaining TTL, as a
//     fraction of the lock's TTL, that a lock had when a renewal of it was
//     sent since the previous Collect; not collected when nothing was
//     renewed since then. Collect resets it.
//
// The counters and lockwatch_locks_tracked are read from
// [watchdog.Watchdog.Stats] at each Collect, so they include what the
// watchdog did before NewCollector. The histogram and the headroom are fed by an observer that
// NewCollector adds to w ([watchdog.Watchdog.AddObserver]) for the rest of
// w's life, and start empty: make one collector per watchdog, and
// register it once.
//
// Names client_golang refuses (invalid UTF-8, or on releases that accept
// only the classic names, a namespace such as "my-app") make Register fail
// and Collect send invalid metrics; nothing panics. With a nil w the
// collector describes the same metrics and collects none, so that an
// application can register it whether or not its watchdog could be
// attached.
//
// The collector is safe for concurrent use.
func NewCollector(namespace, subsystem string, w *watchdog.Watchdog) prometheus.Collector {
	name := func(n string) string { return prometheus.BuildFQName(namespace, subsystem, n) }
	c := &collector{
		w: w,
		tracked: prometheus.NewDesc(name("locks_tracked"),
			"Locks the registry tracks.", nil, nil),
		renewals: prometheus.NewDesc(name("renewals_total"),
			"Locks renewed by the watchdog.", nil, nil),
		renewErrors: prometheus.NewDesc(name("renew_errors_total"),
			"Renew script calls that failed or were not answered in time; their locks are retried.", nil, nil),
		losses: prometheus.NewDesc(name("losses_total"),
			"Locks the watchdog gave up, by reason.", []string{"reason"}, nil),
		headroom: prometheus.NewDesc(name("headroom_ratio"),
			"Least remaining TTL, as a fraction of the lock's TTL, of a lock renewed since the last collection.", nil, nil),
		sweeps: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace,
			Subsystem: subsystem,
			Name:      "sweep_duration_seconds",
			Help:      "Duration of one endpoint's sweep.",
			Buckets:   slices.Clone(SweepDurationBuckets),
		}),
	}
	if w != nil {
		w.AddObserver(c)
	}
	return c
}

// collector is what NewCollector returns: the descriptions of the metrics
// read from Stats, and the observer that feeds the histogram and the
// headroom.
type collector struct {
	w                                                *watchdog.Watchdog // nil: collects nothing
	tracked, renewals, renewErrors, losses, headroom *prometheus.Desc
	sweeps                                           prometheus.Histogram
	head                                             headroom.Least
}

var (
	_ prometheus.Collector = (*collector)(nil)
	_ watchdog.Observer    = (*collector)(nil)
)

// Describe implements prometheus.Collector.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.tracked
	ch <- c.renewals
	ch <- c.renewErrors
	ch <- c.losses
	ch <- c.headroom
	c.sweeps.Describe(ch)
}

// Collect implements prometheus.Collector.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	if c.w == nil {
		return
	}
	st := c.w.Stats()
	send(ch, c.tracked, prometheus.GaugeValue, float64(st.Tracked))
	send(ch, c.renewals, prometheus.CounterValue, float64(st.Renewals))
	send(ch, c.renewErrors, prometheus.CounterValue, float64(st.RenewErrors))
	for i, n := range lossCounts(st.Losses) {
		send(ch, c.losses, prometheus.CounterValue, float64(n), reasons[i])
	}
	if h, ok := c.head.Take(); ok {
		send(ch, c.headroom, prometheus.GaugeValue, h)
	}
	c.sweeps.Collect(ch)
}

// send sends a constant metric, or an invalid one carrying the error that
// made it impossible (a Desc with an invalid name): the Gather that called
// Collect reports it, where MustNewConstMetric would panic.
func send(ch chan<- prometheus.Metric, d *prometheus.Desc, t prometheus.ValueType, v float64, labels ...string) {
	m, err := prometheus.NewConstMetric(d, t, v, labels...)
	if err != nil {
		m = prometheus.NewInvalidMetric(d, err)
	}
	ch <- m
}

// Renewed implements [watchdog.Observer].
func (c *collector) Renewed(_ string, _ int, headroom float64) { c.head.Note(headroom) }

// RenewFailed implements [watchdog.Observer]; failed calls are counted by
// [watchdog.Watchdog.Stats].
func (c *collector) RenewFailed(string, int, error) {}

// Lost implements [watchdog.Observer]; losses are counted by
// [watchdog.Watchdog.Stats].
func (c *collector) Lost(registry.Lock, error) {}

// Swept implements [watchdog.Observer].
func (c *collector) Swept(_ string, d time.Duration) { c.sweeps.Observe(d.Seconds()) }
