// Package transparency holds the reliability suite's transparency scenario
// (issue 4, scenario 5): the scenarios of the upstream libraries' own test
// suites, re-told here, give the same results through clients watched by a
// registry with an attached watchdog as through clients that are not
// watched, except that a held lock does not expire.
//
// # How a scenario runs
//
// Each test runs its scenario twice against the same real redis-servers
// (internal/testkit/testredis; the test skips without redis-server unless
// LOCKWATCH_REQUIRE_REDIS=1): first through unwatched clients, then through
// watched ones (registry.Watch on every client, watchdog.Attach), each run
// under its own key prefix. A run records what the application can observe:
// errors (by the upstream sentinel or type they match), values, TTL readings
// (as "near the expected value" within a tolerance) and the keys and values
// on the servers. The two records must be equal. A step that holds a lock
// past its TTL records its outcome separately, with the outcome each run
// must show: expired in the unwatched run, still held in the watched one.
//
// The package has only tests; the code lives in its _test.go files.
package transparency
