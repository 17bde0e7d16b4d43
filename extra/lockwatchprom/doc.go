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
//	lockwatch_locks_tracked                     gauge      locks tracked now
//	lockwatch_renewals_total                    counter    locks renewed
//	lockwatch_renew_errors_total                counter    renew calls failed or unanswered
//	lockwatch_losses_total{reason}              counter    locks given up, by reason
//	lockwatch_endpoint_down{endpoint}           gauge      1 while an endpoint's renewals fail
//	lockwatch_deadlines_missed_total{endpoint}  counter    renewals not confirmed by their lock's deadline
//	lockwatch_hedges_total{endpoint}            counter    renewal calls unanswered in time, sent again
//	lockwatch_spare_calls_total{endpoint}       counter    renewal calls sent on the watchdog's own connections
//	lockwatch_unconfirmed_total                 counter    holders told their lock may be lost
//	lockwatch_told_late_total                   counter    of those, told after their lock's deadline
//	lockwatch_lateness_seconds                  gauge      how late the process ran the watchdog lately
//	lockwatch_sweep_duration_seconds            histogram  one endpoint's sweep
//	lockwatch_headroom_ratio                    histogram  least headroom of each renewal pipeline
//
// The reason label is [watchdog.Reason] of the error OnLost gets: gone,
// taken, unreachable, max_hold or quorum. Every reason is collected, 0
// included, so that rate() is defined from the start.
//
// A collection changes nothing: two Prometheus servers scraping one
// process (the usual HA pair) see the same series, and the same values
// but for lockwatch_lateness_seconds, a measurement of the moment. The counters and the
// gauges are read from [watchdog.Watchdog.Stats] at each Collect: they
// include what the watchdog did before the collector was made. The
// histograms are fed by an observer ([watchdog.Watchdog.AddObserver]) and
// start empty.
//
// # Falling behind
//
// A renewal not confirmed by its lock's deadline, when less than a third
// of the lock's TTL is left (sent after it, or answered after it), counts in lockwatch_deadlines_missed_total, by
// endpoint ([watchdog.EndpointStats].Missed): an endpoint that falls
// behind, with more locks due than it renews (a process holding many
// short locks) or answering too slowly, shows there before any lock is
// lost; so does one that does not answer. lockwatch_hedges_total counts
// the endpoint's renewal calls that had not answered when their most
// urgent lock needed an answer: their locks were sent again, in smaller
// calls, on other connections. lockwatch_spare_calls_total counts those
// sent on connections of the watchdog's own because the client's pool had
// none free while a deadline was at stake: the application holds its
// whole pool (workers blocked in BLPOP, say), and the pool is too small
// for it and its locks.
//
// lockwatch_unconfirmed_total counts locks whose holders were told they
// may be lost: no renewal was confirmed in time, and their
// [watchdog.Watchdog.Context] contexts were cancelled with
// [watchdog.ErrUnconfirmed] before their keys could expire. It is an early
// warning, not a loss: a late answer may confirm such a lock, which the
// watchdog renews on; lockwatch_losses_total counts only the locks really
// lost (OnLost). The alerts LockwatchBehind and LockwatchLocksUnconfirmed
// of monitoring/alerts.yml fire on these two counters.
//
// lockwatch_told_late_total counts, of the holders told, those told only
// after their lock's deadline (the instant its key may expire, less the
// drift allowance), when another process could already take the key: the
// process ran the watchdog too late, woken late or kept waiting by a
// thread its host did not run. It should stay 0; the alert
// LockwatchToldLate fires on any increase.
//
// lockwatch_lateness_seconds is how late the process has lately run the
// watchdog's goroutines ([watchdog.Stats].Lateness): woken late, or
// waiting for a CPU. It is the process's doing (a busy host, a low
// GOMAXPROCS, long GC pauses), not Redis's. The watchdog tells holders
// earlier by four times its lateness, up to a quarter of a lock's TTL:
// past a sixteenth of the shortest TTL the application locks with, such
// locks may be told late or lost however well Redis answers. The alert
// LockwatchProcessLate fires on it (50 ms by default: locks of 800 ms).
//
// # Headroom
//
// Whenever the watchdog sends a renewal pipeline, it reports the least
// remaining TTL, as a fraction of the lock's TTL, that any lock it renewed
// had (1 means a whole TTL was left; 0 or less means it was sent when the
// TTL since the lock's last confirmation had run out).
// lockwatch_headroom_ratio is a histogram of these, one observation per
// pipeline ([HeadroomBuckets]). It is a histogram rather than a gauge of
// the least headroom now because a renewal that came late is an event: a
// gauge read at scrape time misses one that happened between two scrapes,
// and a gauge of the least since the last scrape changes when it is read.
// A histogram counts every one, aggregates over processes with sum, and
// reads the same to every scraper.
//
// The fast lane renews a lock when a third of its TTL has passed, so a
// healthy watchdog observes about 0.67 or more; observations at or below
// 0.33 mean renewals came too late for lockwatch's guarantee that a
// renewed lock keeps a third of its TTL (a slow or failing endpoint, an
// overloaded process). The share of such pipelines over five minutes:
//
//	sum(rate(lockwatch_headroom_ratio_bucket{le="0.33"}[5m]))
//	  / sum(rate(lockwatch_headroom_ratio_count[5m]))
//
// # Alerts and dashboard
//
// The directory monitoring/ of this module holds Prometheus alerting rules
// (alerts.yml: locks lost, max hold reached, renew errors, low headroom, an
// endpoint down, renewals behind their deadlines, holders told their lock
// may be lost), their promtool unit tests (alerts_test.yml) and a Grafana
// dashboard (dashboard.json), all for the namespace "lockwatch". Check and
// test the rules with
//
//	promtool check rules monitoring/alerts.yml
//	promtool test rules monitoring/alerts_test.yml
//
// # OpenTelemetry
//
// github.com/lockwatch/lockwatch/extra/lockwatchotel reports the same
// metrics through OpenTelemetry; exported to Prometheus, they get the
// names above.
package lockwatchprom
