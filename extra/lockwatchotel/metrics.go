package lockwatchotel

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"time"
	"weak"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/lockwatch/lockwatch/internal/headroom"
	"github.com/lockwatch/lockwatch/registry"
	"github.com/lockwatch/lockwatch/watchdog"
)

// ScopeName is the name of the Meter the instruments belong to: this
// package's import path.
const ScopeName = "github.com/lockwatch/lockwatch/extra/lockwatchotel"

// Instrument names, and the attribute of [MetricLosses].
const (
	MetricTracked       = "lockwatch.locks.tracked"
	MetricRenewals      = "lockwatch.renewals"
	MetricRenewErrors   = "lockwatch.renew.errors"
	MetricLosses        = "lockwatch.losses"
	MetricSweepDuration = "lockwatch.sweep.duration"
	MetricHeadroom      = "lockwatch.headroom"
	AttributeReason     = "reason"
)

// SweepDurationBuckets are the explicit bucket boundaries, in seconds,
// advised for lockwatch.sweep.duration (a View can replace them);
// InstrumentMetrics copies them.
var SweepDurationBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}

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
//   - lockwatch.sweep.duration, a Float64Histogram (s): how long each
//     endpoint's sweep took.
//   - lockwatch.headroom, a Float64ObservableGauge (1): the least remaining
//     TTL, as a fraction of the lock's TTL, that a lock had when a renewal
//     of it was sent since the previous collection; no data point when
//     nothing was renewed since then.
//
// The counters and lockwatch.locks.tracked are read from
// [watchdog.Watchdog.Stats] when a reader collects, so counts made before
// InstrumentMetrics was called are included. The histogram and the headroom come from an
// observer added to w ([watchdog.Watchdog.AddObserver]) and start empty.
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
	headroom    metric.Float64ObservableGauge
	sweeps      metric.Float64Histogram

	head headroom.Least
}

var _ watchdog.Observer = (*metrics)(nil)

func newMetrics(w *watchdog.Watchdog, o options) (*metrics, error) {
	meter := o.provider.Meter(ScopeName)
	m := &metrics{w: w, attrs: metric.WithAttributeSet(attribute.NewSet(o.attrs...))}
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
	m.headroom, e = meter.Float64ObservableGauge(MetricHeadroom,
		metric.WithDescription("Least remaining TTL, as a fraction of the lock's TTL, of a lock renewed since the last collection."),
		metric.WithUnit("1"))
	err = errors.Join(err, e)
	m.sweeps, e = meter.Float64Histogram(MetricSweepDuration,
		metric.WithDescription("Duration of one endpoint's sweep."),
		metric.WithUnit("s"),
		metric.WithExplicitBucketBoundaries(slices.Clone(SweepDurationBuckets)...))
	err = errors.Join(err, e)
	if err != nil {
		return nil, fmt.Errorf("lockwatchotel: %w", err)
	}
	if _, err := meter.RegisterCallback(m.observe, m.tracked, m.renewals, m.renewErrors, m.losses, m.headroom); err != nil {
		return nil, fmt.Errorf("lockwatchotel: %w", err)
	}
	return m, nil
}

// observe is the callback of the observable instruments.
func (m *metrics) observe(_ context.Context, o metric.Observer) error {
	st := m.w.Stats()
	o.ObserveInt64(m.tracked, int64(st.Tracked), m.attrs)
	o.ObserveInt64(m.renewals, st.Renewals, m.attrs)
	o.ObserveInt64(m.renewErrors, st.RenewErrors, m.attrs)
	for i, n := range lossCounts(st.Losses) {
		o.ObserveInt64(m.losses, n, m.lossAttrs[i])
	}
	if h, ok := m.head.Take(); ok {
		o.ObserveFloat64(m.headroom, h, m.attrs)
	}
	return nil
}

// Renewed implements [watchdog.Observer].
func (m *metrics) Renewed(_ string, _ int, headroom float64) { m.head.Note(headroom) }

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
