package lockwatchotel

import (
	"errors"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// ErrNilMeterProvider is returned by [InstrumentMetrics] when
// [WithMeterProvider] was given nil.
var ErrNilMeterProvider = errors.New("lockwatchotel: WithMeterProvider(nil)")

// Option configures [InstrumentMetrics]. Options are plain values, safe to
// share between goroutines and calls.
type Option interface{ apply(*options) error }

type optionFunc func(*options) error

func (f optionFunc) apply(o *options) error { return f(o) }

type options struct {
	provider metric.MeterProvider
	attrs    []attribute.KeyValue
}

func defaultOptions() options {
	return options{provider: otel.GetMeterProvider()}
}

// WithMeterProvider sets the MeterProvider the instruments are created
// with. A nil provider is an error ([ErrNilMeterProvider]). The default is
// the global provider, otel.GetMeterProvider(), when [InstrumentMetrics] is
// called.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return optionFunc(func(o *options) error {
		if mp == nil {
			return ErrNilMeterProvider
		}
		o.provider = mp
		return nil
	})
}

// WithAttributes adds attrs to every measurement, for example
// attribute.String("watchdog", "billing") to tell apart several watchdogs
// that report to one MeterProvider. An attribute named "reason" is
// overridden on lockwatch.losses, one named "endpoint" on
// lockwatch.endpoint.down, lockwatch.deadlines.missed, lockwatch.hedges
// and lockwatch.spare.calls. Each call adds to the attributes of the calls before
// it. The default is no attribute.
func WithAttributes(attrs ...attribute.KeyValue) Option {
	return optionFunc(func(o *options) error {
		o.attrs = append(o.attrs, attrs...)
		return nil
	})
}
