package lockwatchotel

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"sync"
	"time"
	"weak"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/lockwatch/lockwatch/registry"
	"github.com/lockwatch/lockwatch/watchdog"
)

// ScopeName is the name of the Meter the instruments belong to: this
// package's import path.
const ScopeName = "github.com/lockwatch/lockwatch/extra/lockwatchotel"

// Instrument names, the attribute of [MetricLosses], and the attribute of
// [MetricEndpointDown], [MetricDeadlinesMissed], [MetricHedges] and
// [MetricSpareCalls].
const (
	MetricTracked         = "lockwatch.locks.tracked"
	MetricRenewals        = "lockwatch.renewals"
	MetricRenewErrors     = "lockwatch.renew.errors"
	MetricLosses          = "lockwatch.losses"
	MetricSweepDuration   = "lockwatch.sweep.duration"
	MetricHeadroom        = "lockwatch.headroom"
	MetricEndpointDown    = "lockwatch.endpoint.down"
	MetricDeadlinesMissed = "lockwatch.deadlines.missed"
	MetricHedges          = "lockwatch.hedges"
	MetricSpareCalls      = "lockwatch.spare.calls"
	MetricUnconfirmed     = "lockwatch.unconfirmed"
	MetricToldLate        = "lockwatch.told.late"
	MetricLateness        = "lockwatch.lateness"
	AttributeReason       = "reason"
	AttributeEndpoint     = "endpoint"
)

// SweepDurationBuckets returns the explicit bucket boundaries, in seconds,
// advised for lockwatch.sweep.duration (a View can replace them);
// a new slice each call.
func SweepDurationBuckets() []float64 {
	return []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}
}

// HeadroomBuckets returns the explicit bucket boundaries, as fractions of a
// lock's TTL, advised for lockwatch.headroom; a new slice each call. 0.33
// is the first below a third: a renewal counted at or below it was sent with less than a third of its lock's TTL left, which
// lockwatch's guarantee rules out while Redis answers. The fast lane
// renews at about 0.67.
func HeadroomBuckets() []float64 {
	return []float64{0, 0.1, 0.2, 0.33, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1}
}

// Errors returned by [InstrumentMetrics].
var (
	// ErrNilWatchdog: the watchdog is nil.
	ErrNilWatchdog = errors.New("lockwatchotel: nil watchdog")
	// ErrInstrumented: InstrumentMetrics already succeeded for this
	// watchdog; a second set of callbacks would report every count twice.
	ErrInstrumented = errors.New("lockwatchotel: watchdog already instrumented")
)

// reasons are the loss reasons lockwatch.losses reports, in this order.
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

// instrumented holds the watchdogs InstrumentMetrics succeeded for. Its
// keys are weak: an entry goes when its watchdog is garbage collected.
var instrumented sync.Map // weak.Pointer[watchdog.Watchdog] -> struct{}

// InstrumentMetrics reports w's metrics through OpenTelemetry, with a Meter
// named [ScopeName] from the MeterProvider of [WithMeterProvider] (by
// default the global one):
//
//   - lockwatch.locks.tracked, an Int64ObservableGauge ({lock}): locks the
//     registry tracks.
//   - lockwatch.renewals, an Int64ObservableCounter ({renewal}): locks
//     renewed.
//   - lockwatch.renew.errors, an Int64ObservableCounter ({call}): renew
//     script calls that failed or were not answered in time.
//   - lockwatch.losses, an Int64ObservableCounter ({lock}) with the
//     attribute reason ([watchdog.Reason]: gone, taken, unreachable,
//     max_hold, quorum; every reason is reported, 0 included): locks given
//     up.
//   - lockwatch.endpoint.down, an Int64ObservableGauge ({endpoint}) with the
//     attribute endpoint, one data point per endpoint the watchdog renews
//     on ([watchdog.EndpointStats]): 1 while its renewals fail (its last
//     renewal pipeline failed and none has succeeded since), 0 otherwise.
//   - lockwatch.deadlines.missed, an Int64ObservableCounter ({renewal})
//     with the attribute endpoint: renewals sent on the endpoint after
//     their lock's deadline, with less than a third of its TTL left
//     ([watchdog.EndpointStats].Missed). An endpoint that falls behind
//     (more locks due than it renews, or answers too slowly) shows here
//     before any lock is lost, and so does one that does not answer.
//   - lockwatch.hedges, an Int64ObservableCounter ({call}) with the
//     attribute endpoint: renewal calls on the endpoint that had not
//     answered when their most urgent lock needed an answer, whose locks
//     were sent again in smaller calls on other connections
//     ([watchdog.EndpointStats].Hedges).
//   - lockwatch.spare.calls, an Int64ObservableCounter ({call}) with the
//     attribute endpoint: renewal calls on the endpoint sent on
//     connections of the watchdog's own, because the watched client's
//     pool had no connection free while a deadline was at stake
//     ([watchdog.EndpointStats].SpareCalls): the application holds its
//     whole pool, which is too small for it and its locks.
//   - lockwatch.unconfirmed, an Int64ObservableCounter ({lock}): locks
//     whose holders were told they may be lost, because no renewal was
//     confirmed in time (their [watchdog.Watchdog.Context] contexts
//     cancelled with [watchdog.ErrUnconfirmed]). An early warning, not a
//     loss: such a lock is renewed on, and lockwatch.losses counts it only
//     if it is lost.
//   - lockwatch.told.late, an Int64ObservableCounter ({lock}): of those,
//     the locks whose holders were told after their lock's deadline (the
//     instant its key may expire, less the drift allowance), when another
//     process could already take the key ([watchdog.Stats].ToldLate): the
//     process ran the watchdog too late. It should stay 0.
//   - lockwatch.lateness, a Float64ObservableGauge (s): how late the
//     process has lately run the watchdog's goroutines
//     ([watchdog.Stats].Lateness). Past a sixteenth of the shortest TTL
//     the application locks with, the process is too starved of CPU for
//     locks that short, however well Redis answers.
//   - lockwatch.sweep.duration, a Float64Histogram (s): how long each
//     endpoint's sweep took.
//   - lockwatch.headroom, a Float64Histogram (1): for each renewal
//     pipeline that renewed locks, the least remaining TTL, as a fraction
//     of the lock's TTL, that one of them had when it was sent.
//
// Collecting only reads: a collection changes no value another one sees
// (but see the package documentation on several readers). The
// counters and the gauges are read from [watchdog.Watchdog.Stats] when a
// reader collects, so counts made before InstrumentMetrics was called are
// included. The histograms are fed by an observer added to w
// ([watchdog.Watchdog.AddObserver]) and start empty.
//
// Call InstrumentMetrics once per watchdog: it returns [ErrInstrumented]
// for a watchdog it already instrumented, [ErrNilWatchdog] for a nil one,
// and the error of an option or of the MeterProvider otherwise (then no
// callback and no observer is registered, and a later call may succeed).
// It is safe for concurrent use.
func InstrumentMetrics(w *watchdog.Watchdog, opts ...Option) error {
	if w == nil {
		return ErrNilWatchdog
	}
	o := defaultOptions()
	for i, opt := range opts {
		if opt == nil {
			return fmt.Errorf("lockwatchotel: option %d is nil", i)
		}
		if err := opt.apply(&o); err != nil {
			return err
		}
	}
	key := weak.Make(w)
	if _, loaded := instrumented.LoadOrStore(key, struct{}{}); loaded {
		return ErrInstrumented
	}
	m, err := newMetrics(w, o)
	if err != nil {
		instrumented.Delete(key)
		return err
	}
	runtime.AddCleanup(w, func(k weak.Pointer[watchdog.Watchdog]) { instrumented.Delete(k) }, key)
	w.AddObserver(m)
	return nil
}

// metrics is the instruments of one watchdog and the observer that feeds
// the histogram and the headroom.
type metrics struct {
	w         *watchdog.Watchdog
	attrs     metric.MeasurementOption               // the base attributes
	lossAttrs [len(reasons)]metric.MeasurementOption // base plus reason

	tracked     metric.Int64ObservableGauge
	renewals    metric.Int64ObservableCounter
	renewErrors metric.Int64ObservableCounter
	losses      metric.Int64ObservableCounter
	down        metric.Int64ObservableGauge
	missed      metric.Int64ObservableCounter
	hedges      metric.Int64ObservableCounter
	spareCalls  metric.Int64ObservableCounter
	unconfirmed metric.Int64ObservableCounter
	toldLate    metric.Int64ObservableCounter
	lateness    metric.Float64ObservableGauge
	headroom    metric.Float64Histogram
	sweeps      metric.Float64Histogram
	base        []attribute.KeyValue // the base attributes, to which endpoint is added
}

var _ watchdog.Observer = (*metrics)(nil)

func newMetrics(w *watchdog.Watchdog, o options) (*metrics, error) {
	meter := o.provider.Meter(ScopeName)
	m := &metrics{w: w, attrs: metric.WithAttributeSet(attribute.NewSet(o.attrs...)), base: o.attrs}
	for i, r := range reasons {
		kv := append(append([]attribute.KeyValue(nil), o.attrs...), attribute.String(AttributeReason, r))
		m.lossAttrs[i] = metric.WithAttributeSet(attribute.NewSet(kv...))
	}
	var err, e error
	m.tracked, e = meter.Int64ObservableGauge(MetricTracked,
		metric.WithDescription("Locks the registry tracks."),
		metric.WithUnit("{lock}"))
	err = errors.Join(err, e)
	m.renewals, e = meter.Int64ObservableCounter(MetricRenewals,
		metric.WithDescription("Locks renewed by the watchdog."),
		metric.WithUnit("{renewal}"))
	err = errors.Join(err, e)
	m.renewErrors, e = meter.Int64ObservableCounter(MetricRenewErrors,
		metric.WithDescription("Renew script calls that failed or were not answered in time; their locks are retried."),
		metric.WithUnit("{call}"))
	err = errors.Join(err, e)
	m.losses, e = meter.Int64ObservableCounter(MetricLosses,
		metric.WithDescription("Locks the watchdog gave up, by reason."),
		metric.WithUnit("{lock}"))
	err = errors.Join(err, e)
	m.down, e = meter.Int64ObservableGauge(MetricEndpointDown,
		metric.WithDescription("1 while the endpoint's renewals fail (the last renewal pipeline failed and none has succeeded since), else 0."),
		metric.WithUnit("{endpoint}"))
	err = errors.Join(err, e)
	m.missed, e = meter.Int64ObservableCounter(MetricDeadlinesMissed,
		metric.WithDescription("Renewals on the endpoint not confirmed by their lock's deadline, when less than a third of its TTL is left (sent after it, or answered after it): the endpoint falls behind (more locks due than it renews), answers too slowly or does not answer, or the process is too starved to send and read in time. It grows before locks are lost."),
		metric.WithUnit("{renewal}"))
	err = errors.Join(err, e)
	m.hedges, e = meter.Int64ObservableCounter(MetricHedges,
		metric.WithDescription("Renewal calls on the endpoint not answered when their most urgent lock needed an answer; their locks were sent again in smaller calls on other connections."),
		metric.WithUnit("{call}"))
	err = errors.Join(err, e)
	m.spareCalls, e = meter.Int64ObservableCounter(MetricSpareCalls,
		metric.WithDescription("Renewal calls on the endpoint sent on connections of the watchdog's own because the watched client's pool had no connection free while a deadline was at stake: the application holds its whole pool, which is too small for it and its locks."),
		metric.WithUnit("{call}"))
	err = errors.Join(err, e)
	m.unconfirmed, e = meter.Int64ObservableCounter(MetricUnconfirmed,
		metric.WithDescription("Locks whose holders were told they may be lost (Watchdog.Context cancelled with ErrUnconfirmed): no renewal was confirmed in time. An early warning, not a loss: the lock is renewed on, and counted in lockwatch.losses only if lost."),
		metric.WithUnit("{lock}"))
	err = errors.Join(err, e)
	m.toldLate, e = meter.Int64ObservableCounter(MetricToldLate,
		metric.WithDescription("Locks whose holders were told they may be lost only after their lock's deadline (the instant its key may expire, less the drift allowance), when another process could already take the key: the process ran the watchdog too late (woken late, or kept waiting by a thread its host did not run). It should stay 0."),
		metric.WithUnit("{lock}"))
	err = errors.Join(err, e)
	m.lateness, e = meter.Float64ObservableGauge(MetricLateness,
		metric.WithDescription("How late the process has lately run the watchdog's goroutines (woken late, or waiting for a CPU). Past a sixteenth of the shortest lock TTL the process is too starved for locks that short: their holders may be told late or their locks lost, however well Redis answers."),
		metric.WithUnit("s"))
	err = errors.Join(err, e)
	m.headroom, e = meter.Float64Histogram(MetricHeadroom,
		metric.WithDescription("Least remaining TTL, as a fraction of the lock's TTL, of the locks a renewal pipeline renewed, when it was sent."),
		metric.WithUnit("1"),
		metric.WithExplicitBucketBoundaries(HeadroomBuckets()...))
	err = errors.Join(err, e)
	m.sweeps, e = meter.Float64Histogram(MetricSweepDuration,
		metric.WithDescription("Duration of one endpoint's sweep."),
		metric.WithUnit("s"),
		metric.WithExplicitBucketBoundaries(SweepDurationBuckets()...))
	err = errors.Join(err, e)
	if err != nil {
		return nil, fmt.Errorf("lockwatchotel: %w", err)
	}
	if _, err := meter.RegisterCallback(m.observe, m.tracked, m.renewals, m.renewErrors, m.losses, m.down,
		m.missed, m.hedges, m.spareCalls, m.unconfirmed, m.toldLate, m.lateness); err != nil {
		return nil, fmt.Errorf("lockwatchotel: %w", err)
	}
	return m, nil
}

// observe is the callback of the observable instruments. It changes no
// state.
func (m *metrics) observe(_ context.Context, o metric.Observer) error {
	st := m.w.Stats()
	o.ObserveInt64(m.tracked, int64(st.Tracked), m.attrs)
	o.ObserveInt64(m.renewals, st.Renewals, m.attrs)
	o.ObserveInt64(m.renewErrors, st.RenewErrors, m.attrs)
	o.ObserveInt64(m.unconfirmed, st.Unconfirmed, m.attrs)
	o.ObserveInt64(m.toldLate, st.ToldLate, m.attrs)
	o.ObserveFloat64(m.lateness, st.Lateness.Seconds(), m.attrs)
	for i, n := range lossCounts(st.Losses) {
		o.ObserveInt64(m.losses, n, m.lossAttrs[i])
	}
	for _, ep := range st.Endpoints {
		var down int64
		if ep.Down {
			down = 1
		}
		kv := append(slices.Clip(m.base), attribute.String(AttributeEndpoint, ep.Endpoint))
		attrs := metric.WithAttributeSet(attribute.NewSet(kv...))
		o.ObserveInt64(m.down, down, attrs)
		o.ObserveInt64(m.missed, ep.Missed, attrs)
		o.ObserveInt64(m.hedges, ep.Hedges, attrs)
		o.ObserveInt64(m.spareCalls, ep.SpareCalls, attrs)
	}
	return nil
}

// Renewed implements [watchdog.Observer]. A NaN headroom is not recorded:
// it would make the histogram's sum NaN for good.
func (m *metrics) Renewed(_ string, _ int, headroom float64) {
	if !math.IsNaN(headroom) {
		m.headroom.Record(context.Background(), headroom, m.attrs)
	}
}

// RenewFailed implements [watchdog.Observer]; failed calls are counted by
// [watchdog.Watchdog.Stats].
func (m *metrics) RenewFailed(string, int, error) {}

// Lost implements [watchdog.Observer]; losses are counted by
// [watchdog.Watchdog.Stats].
func (m *metrics) Lost(registry.Lock, error) {}

// Swept implements [watchdog.Observer].
func (m *metrics) Swept(_ string, d time.Duration) {
	m.sweeps.Record(context.Background(), d.Seconds(), m.attrs)
}
