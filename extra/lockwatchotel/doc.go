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
//	lockwatch.locks.tracked     Int64ObservableGauge    {lock}      locks tracked now
//	lockwatch.renewals          Int64ObservableCounter  {renewal}   locks renewed
//	lockwatch.renew.errors      Int64ObservableCounter  {call}      renew calls failed or unanswered
//	lockwatch.losses            Int64ObservableCounter  {lock}      locks given up, attribute reason
//	lockwatch.endpoint.down     Int64ObservableGauge    {endpoint}  1 while an endpoint's renewals fail, attribute endpoint
//	lockwatch.deadlines.missed  Int64ObservableCounter  {renewal}   renewals not confirmed by their lock's deadline, attribute endpoint
//	lockwatch.hedges            Int64ObservableCounter  {call}      renewal calls unanswered in time, sent again, attribute endpoint
//	lockwatch.spare.calls       Int64ObservableCounter  {call}      renewal calls sent on the watchdog's own connections, attribute endpoint
//	lockwatch.unconfirmed       Int64ObservableCounter  {lock}      holders told their lock may be lost
//	lockwatch.told.late         Int64ObservableCounter  {lock}      of those, told after their lock's deadline
//	lockwatch.lateness          Float64ObservableGauge  s           how late the process ran the watchdog lately
//	lockwatch.sweep.duration    Float64Histogram        s           one endpoint's sweep
//	lockwatch.headroom          Float64Histogram        1           least headroom of each renewal pipeline
//
// The reason attribute of lockwatch.losses is [watchdog.Reason] of the
// error OnLost gets: gone, taken, unreachable, max_hold or quorum. Every
// reason is reported, 0 included, so that a rate is defined from the
// start.
//
// lockwatch.deadlines.missed is the sign of an endpoint that falls
// behind (more locks due than it renews in time, or answers too slowly)
// before any lock is lost; it counts the renewals of an endpoint that
// does not answer too. lockwatch.unconfirmed is an early warning, not a
// loss: its locks' holders were told ([watchdog.ErrUnconfirmed]) before
// their keys could expire, a late answer may still confirm such a lock,
// and lockwatch.losses counts only the locks really lost.
// lockwatch.lateness is the process's own doing (a busy host, a low
// GOMAXPROCS, long GC pauses), not Redis's: past a sixteenth of the
// shortest TTL the application locks with, such locks may be told late or
// lost however well Redis answers.
//
// # Counts before InstrumentMetrics
//
// The counters and the gauges are read from [watchdog.Watchdog.Stats] in
// a callback when a reader collects: they include what the watchdog did
// before InstrumentMetrics was called. The histograms are fed by an
// observer ([watchdog.Watchdog.AddObserver]) and start empty. Collecting
// changes nothing: two Prometheus servers scraping one exporter see the
// same values, but for lockwatch.lateness, a measurement of the moment. (Some releases of go.opentelemetry.io/otel/sdk/metric,
// v1.20.0 among them, count observable instruments more than once when a
// MeterProvider has several readers: opentelemetry-go issues 4741 and
// 5866. Use a release with their fixes before giving a provider several
// readers.)
//
// # Headroom
//
// Whenever the watchdog sends a renewal pipeline, it reports the least
// remaining TTL, as a fraction of the lock's TTL, that any lock it renewed
// had (1 means a whole TTL was left; 0 or less means it was sent when the
// TTL since the lock's last confirmation had run out). lockwatch.headroom
// records these, one measurement per pipeline, in the buckets
// [HeadroomBuckets]. It is a histogram rather than a gauge of the least
// headroom now because a renewal that came late is an event: a gauge read
// at collection misses one between two collections, and a gauge of the
// least since the last collection changes when it is read. The fast lane
// renews a lock when a third of its TTL has passed, so a healthy watchdog
// records about 0.67 or more; measurements at or below 0.33 mean renewals
// came too late for lockwatch's guarantee that a renewed lock keeps a
// third of its TTL (a slow or failing endpoint, an overloaded process).
//
// # Prometheus
//
// Exported through go.opentelemetry.io/otel/exporters/prometheus, the
// names become lockwatch_locks_tracked, lockwatch_renewals_total,
// lockwatch_renew_errors_total, lockwatch_losses_total,
// lockwatch_endpoint_down, lockwatch_deadlines_missed_total,
// lockwatch_hedges_total, lockwatch_spare_calls_total,
// lockwatch_unconfirmed_total, lockwatch_told_late_total,
// lockwatch_lateness_seconds, lockwatch_sweep_duration_seconds and
// lockwatch_headroom_ratio: the names
// github.com/lockwatch/lockwatch/extra/lockwatchprom gives them with the
// namespace "lockwatch", so that its alert rules and dashboard apply.
package lockwatchotel
