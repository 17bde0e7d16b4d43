// Package lockwatchotel reports a lockwatch watchdog's metrics through
// OpenTelemetry.
//
// It is a module of its own (github.com/lockwatch/lockwatch/extra/lockwatchotel),
// so that the core module depends on no OpenTelemetry package.
//
// # Usage
//
//	wd, err := watchdog.Attach(reg)
//	if err != nil { ... }
//	defer wd.Stop()
//	if err := lockwatchotel.InstrumentMetrics(wd); err != nil { ... }
//
// [InstrumentMetrics] uses the global MeterProvider unless
// [WithMeterProvider] names another. Call it once per watchdog; to tell
// several watchdogs apart on one provider, give each its own attributes
// with [WithAttributes].
//
// # Instruments
//
// The Meter is named [ScopeName], this package's import path.
//
//	lockwatch.locks.tracked   Int64ObservableGauge    {lock}     locks tracked now
//	lockwatch.renewals        Int64ObservableCounter  {renewal}  locks renewed
//	lockwatch.renew.errors    Int64ObservableCounter  {call}     renew calls failed or unanswered
//	lockwatch.losses          Int64ObservableCounter  {lock}     locks given up, attribute reason
//	lockwatch.sweep.duration  Float64Histogram        s          one endpoint's sweep
//	lockwatch.headroom        Float64ObservableGauge  1          least headroom since the last collection
//
// The reason attribute of lockwatch.losses is [watchdog.Reason] of the
// error OnLost gets: gone, taken, unreachable, max_hold or quorum. Every
// reason is reported, 0 included, so that a rate is defined from the
// start.
//
// # Counts before InstrumentMetrics
//
// The counters and the gauge of tracked locks are read from
// [watchdog.Watchdog.Stats] in a callback when a reader collects: they
// include what the watchdog did before InstrumentMetrics was called. The
// sweep histogram and the headroom are fed by an observer
// ([watchdog.Watchdog.AddObserver]) and start empty.
//
// # Headroom
//
// Whenever the watchdog sends a renewal pipeline it reports the least
// remaining TTL, as a fraction of the lock's TTL, that any lock in it had
// (1 means a whole TTL was left; 0 or less means it was sent when the TTL
// since the lock's last confirmation had run out). lockwatch.headroom is
// the least of these seen since the previous collection, and collecting
// resets it: a collection with no renewal since the previous one has no
// data point. With several readers on one MeterProvider, each collection,
// by any reader, resets it. The fast lane renews a lock when a third of
// its TTL has passed, so a healthy watchdog reports about 0.67 or more;
// values falling towards 0 mean renewals come late (a slow or failing
// endpoint, an overloaded process).
//
// # Prometheus
//
// Exported through go.opentelemetry.io/otel/exporters/prometheus, the
// names become lockwatch_locks_tracked, lockwatch_renewals_total,
// lockwatch_renew_errors_total, lockwatch_losses_total,
// lockwatch_sweep_duration_seconds and lockwatch_headroom_ratio: the
// names github.com/lockwatch/lockwatch/extra/lockwatchprom gives them
// with the namespace "lockwatch".
package lockwatchotel
