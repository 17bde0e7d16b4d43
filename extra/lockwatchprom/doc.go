// Package lockwatchprom collects a lockwatch watchdog's metrics for
// Prometheus, with github.com/prometheus/client_golang.
//
// It is a module of its own (github.com/lockwatch/lockwatch/extra/lockwatchprom),
// so that the core module depends on no Prometheus package.
//
// # Usage
//
//	wd, err := watchdog.Attach(reg)
//	if err != nil { ... }
//	defer wd.Stop()
//	prometheus.MustRegister(lockwatchprom.NewCollector("lockwatch", "", wd))
//
// Make one collector per watchdog ([NewCollector]) and register it once.
// To put several watchdogs in one registry, tell them apart with a label:
//
//	r := prometheus.WrapRegistererWith(prometheus.Labels{"watchdog": "billing"}, registry)
//	r.MustRegister(lockwatchprom.NewCollector("lockwatch", "", billing))
//
// # Metrics
//
// With the namespace "lockwatch" and no subsystem:
//
//	lockwatch_locks_tracked           gauge      locks tracked now
//	lockwatch_renewals_total          counter    locks renewed
//	lockwatch_renew_errors_total      counter    renew calls failed or unanswered
//	lockwatch_losses_total{reason}    counter    locks given up, by reason
//	lockwatch_sweep_duration_seconds  histogram  one endpoint's sweep
//	lockwatch_headroom_ratio          gauge      least headroom since the last collection
//
// The reason label is [watchdog.Reason] of the error OnLost gets: gone,
// taken, unreachable, max_hold or quorum. Every reason is collected, 0
// included, so that rate() is defined from the start.
//
// The counters and the gauge of tracked locks are read from
// [watchdog.Watchdog.Stats] at each Collect: they include what the
// watchdog did before the collector was made. The sweep histogram and
// the headroom are fed by an observer ([watchdog.Watchdog.AddObserver])
// and start empty.
//
// # Headroom
//
// Whenever the watchdog sends a renewal pipeline it reports the least
// remaining TTL, as a fraction of the lock's TTL, that any lock in it had
// (1 means a whole TTL was left; 0 or less means it was sent when the TTL
// since the lock's last confirmation had run out).
// lockwatch_headroom_ratio is the least of these seen since the previous
// Collect, and Collect resets it: a scrape with no renewal since the
// previous one has no lockwatch_headroom_ratio. With several registries
// or scrapers, each Collect, by any of them, resets it. The fast lane
// renews a lock when a third of its TTL has passed, so a healthy watchdog
// reports about 0.67 or more; values falling towards 0 mean renewals come
// late (a slow or failing endpoint, an overloaded process). Below 1/3,
// lockwatch's guarantee that a renewed lock keeps a third of its TTL no
// longer holds: alert on min_over_time(lockwatch_headroom_ratio[5m]) < 0.33.
//
// # OpenTelemetry
//
// github.com/lockwatch/lockwatch/extra/lockwatchotel reports the same
// metrics through OpenTelemetry; exported to Prometheus, they get the
// names above.
package lockwatchprom
