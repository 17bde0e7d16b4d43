package lockwatchprom

import (
	"math"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lockwatch/lockwatch/registry"
	"github.com/lockwatch/lockwatch/watchdog"
)

// SweepDurationBuckets returns the buckets, in seconds, of the sweep duration
// histogram (a new slice each call).
func SweepDurationBuckets() []float64 {
	return []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}
}

// HeadroomBuckets returns the buckets of the headroom histogram, as fractions
// of a lock's TTL (a new slice each call). 0.33 is the first below a
// third: a renewal counted at or below it was sent with less than a third
// of its lock's TTL left, which lockwatch's guarantee rules out while Redis
// answers. The fast lane renews at about 0.67.
func HeadroomBuckets() []float64 {
	return []float64{0, 0.1, 0.2, 0.33, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1}
}

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
//   - lockwatch_endpoint_down{endpoint}, a gauge: 1 while the endpoint's
//     renewals fail (its last renewal pipeline failed and none has
//     succeeded since), 0 otherwise; one series per endpoint the watchdog
//     renews on ([watchdog.EndpointStats]).
//   - lockwatch_deadlines_missed_total{endpoint}, a counter: renewals on
//     the endpoint not confirmed by their lock's deadline, when less than
//     a third of its TTL is left: sent after it, or answered after it
//     ([watchdog.EndpointStats].Missed). An endpoint that
//     falls behind (more locks due than it renews, or answers too slowly)
//     shows here before any lock is lost, and so does one that does not
//     answer.
//   - lockwatch_hedges_total{endpoint}, a counter: renewal calls on the
//     endpoint that had not answered when their most urgent lock needed
//     an answer, whose locks were sent again in smaller calls on other
//     connections ([watchdog.EndpointStats].Hedges).
//   - lockwatch_spare_calls_total{endpoint}, a counter: renewal calls on
//     the endpoint sent on connections of the watchdog's own, because the
//     watched client's pool had no connection free while a deadline was
//     at stake ([watchdog.EndpointStats].SpareCalls): the application
//     holds its whole pool, which is too small for it and its locks.
//   - lockwatch_unconfirmed_total, a counter: locks whose holders were
//     told they may be lost, because no renewal was confirmed in time
//     (their [watchdog.Watchdog.Context] contexts cancelled with
//     [watchdog.ErrUnconfirmed]). An early warning, not a loss: such a
//     lock is renewed on, and lockwatch_losses_total counts it only if
//     it is lost.
//   - lockwatch_told_late_total, a counter: of those, the locks whose
//     holders were told after their lock's deadline (the instant its key
//     may expire, less the drift allowance), when another process could
//     already take the key ([watchdog.Stats].ToldLate): the process ran
//     the watchdog too late. It should stay 0.
//   - lockwatch_lateness_seconds, a gauge: how late the process has
//     lately run the watchdog's goroutines ([watchdog.Stats].Lateness).
//     Past a sixteenth of the shortest TTL the application locks with,
//     the process is too starved of CPU for locks that short, however
//     well Redis answers.
//   - lockwatch_sweep_duration_seconds, a histogram
//     ([SweepDurationBuckets]): how long each endpoint's sweep took.
//   - lockwatch_headroom_ratio, a histogram ([HeadroomBuckets]): for each
//     renewal pipeline that renewed locks, the least remaining TTL, as a
//     fraction of the lock's TTL, that one of them had when it was sent.
//
// Collect only reads: any number of registries and scrapers see the same
// values. The counters, lockwatch_locks_tracked and
// lockwatch_endpoint_down are read from [watchdog.Watchdog.Stats] at each
// Collect, so they include what the watchdog did before NewCollector. The
// series of an endpoint the watchdog no longer renews on (a client
// unwatched) go with it. The
// histograms are fed by an observer that NewCollector adds to w
// ([watchdog.Watchdog.AddObserver]) for the rest of w's life, and start
// empty: make one collector per watchdog, and register it once.
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
		down: prometheus.NewDesc(name("endpoint_down"),
			"1 while the endpoint's renewals fail (the last renewal pipeline failed and none has succeeded since), else 0.", []string{"endpoint"}, nil),
		missed: prometheus.NewDesc(name("deadlines_missed_total"),
			"Renewals on the endpoint not confirmed by their lock's deadline, when less than a third of its TTL is left (sent after it, or answered after it): the endpoint falls behind (more locks due than it renews), answers too slowly or does not answer, or the process is too starved to send and read in time. It grows before locks are lost.", []string{"endpoint"}, nil),
		hedges: prometheus.NewDesc(name("hedges_total"),
			"Renewal calls on the endpoint not answered when their most urgent lock needed an answer; their locks were sent again in smaller calls on other connections.", []string{"endpoint"}, nil),
		spareCalls: prometheus.NewDesc(name("spare_calls_total"),
			"Renewal calls on the endpoint sent on connections of the watchdog's own because the watched client's pool had no connection free while a deadline was at stake: the application holds its whole pool, which is too small for it and its locks.", []string{"endpoint"}, nil),
		unconfirmed: prometheus.NewDesc(name("unconfirmed_total"),
			"Locks whose holders were told they may be lost (Watchdog.Context cancelled with ErrUnconfirmed): no renewal was confirmed in time. An early warning, not a loss: the lock is renewed on, and counted in "+name("losses_total")+" only if lost.", nil, nil),
		toldLate: prometheus.NewDesc(name("told_late_total"),
			"Locks whose holders were told they may be lost only after their lock's deadline (the instant its key may expire, less the drift allowance), when another process could already take the key: the process ran the watchdog too late (woken late, or kept waiting by a thread its host did not run). It should stay 0.", nil, nil),
		lateness: prometheus.NewDesc(name("lateness_seconds"),
			"How late the process has lately run the watchdog's goroutines (woken late, or waiting for a CPU). Past a sixteenth of the shortest lock TTL the process is too starved for locks that short: their holders may be told late or their locks lost, however well Redis answers.", nil, nil),
		sweeps: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace,
			Subsystem: subsystem,
			Name:      "sweep_duration_seconds",
			Help:      "Duration of one endpoint's sweep.",
			Buckets:   SweepDurationBuckets(),
		}),
		headroom: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace,
			Subsystem: subsystem,
			Name:      "headroom_ratio",
			Help:      "Least remaining TTL, as a fraction of the lock's TTL, of the locks a renewal pipeline renewed, when it was sent.",
			Buckets:   HeadroomBuckets(),
		}),
	}
	if w != nil {
		w.AddObserver(c)
	}
	return c
}

// collector is what NewCollector returns: the descriptions of the metrics
// read from Stats, and the observer that feeds the histograms.
type collector struct {
	w                                            *watchdog.Watchdog // nil: collects nothing
	tracked, renewals, renewErrors, losses, down *prometheus.Desc
	missed, hedges, spareCalls, unconfirmed      *prometheus.Desc
	toldLate, lateness                           *prometheus.Desc
	sweeps, headroom                             prometheus.Histogram
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
	ch <- c.down
	ch <- c.missed
	ch <- c.hedges
	ch <- c.spareCalls
	ch <- c.unconfirmed
	ch <- c.toldLate
	ch <- c.lateness
	c.sweeps.Describe(ch)
	c.headroom.Describe(ch)
}

// Collect implements prometheus.Collector. It changes no state.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	if c.w == nil {
		return
	}
	st := c.w.Stats()
	send(ch, c.tracked, prometheus.GaugeValue, float64(st.Tracked))
	send(ch, c.renewals, prometheus.CounterValue, float64(st.Renewals))
	send(ch, c.renewErrors, prometheus.CounterValue, float64(st.RenewErrors))
	send(ch, c.unconfirmed, prometheus.CounterValue, float64(st.Unconfirmed))
	send(ch, c.toldLate, prometheus.CounterValue, float64(st.ToldLate))
	send(ch, c.lateness, prometheus.GaugeValue, st.Lateness.Seconds())
	for i, n := range lossCounts(st.Losses) {
		send(ch, c.losses, prometheus.CounterValue, float64(n), reasons[i])
	}
	for _, ep := range st.Endpoints {
		down := 0.0
		if ep.Down {
			down = 1
		}
		send(ch, c.down, prometheus.GaugeValue, down, ep.Endpoint)
		send(ch, c.missed, prometheus.CounterValue, float64(ep.Missed), ep.Endpoint)
		send(ch, c.hedges, prometheus.CounterValue, float64(ep.Hedges), ep.Endpoint)
		send(ch, c.spareCalls, prometheus.CounterValue, float64(ep.SpareCalls), ep.Endpoint)
	}
	c.sweeps.Collect(ch)
	c.headroom.Collect(ch)
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

// Renewed implements [watchdog.Observer]. A NaN headroom is not observed:
// it would make the histogram's sum NaN for good.
func (c *collector) Renewed(_ string, _ int, headroom float64) {
	if !math.IsNaN(headroom) {
		c.headroom.Observe(headroom)
	}
}

// RenewFailed implements [watchdog.Observer]; failed calls are counted by
// [watchdog.Watchdog.Stats].
func (c *collector) RenewFailed(string, int, error) {}

// Lost implements [watchdog.Observer]; losses are counted by
// [watchdog.Watchdog.Stats].
func (c *collector) Lost(registry.Lock, error) {}

// Swept implements [watchdog.Observer].
func (c *collector) Swept(_ string, d time.Duration) { c.sweeps.Observe(d.Seconds()) }
