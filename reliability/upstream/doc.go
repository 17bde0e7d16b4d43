// Package upstream runs the upstream lock libraries' own test suites
// against clients that lockwatch watches (issue 9, item 6).
//
// TestUpstreamSuites takes the test files of redislock v0.9.4 and v0.10.0
// and of redsync v4.12.1 and v4.18.1 from the Go module cache (go mod
// download), copies each module into a temporary directory, adapts the
// tests there mechanically, builds the test binary once, and runs it three
// times: without lockwatch, with a registry and a watchdog with default
// options, and with the watchdog on "@every 50ms". Each test must give the
// same result with lockwatch as without, unless expected_differences.txt
// lists the difference with its reason; every listed difference must occur
// (one marked intermittent may not, see Timing).
// Nothing of the upstream modules is kept in this repository: only the
// runner, the injected files' templates (testdata) and the list.
//
// # The adaptation
//
// Every call of go-redis v9's NewClient in the test files is replaced by a
// call of lockwatchNewClient, which an injected test file defines: it sends
// a TCP client to a redis-server the runner started on a free port (the
// tests name 127.0.0.1:6379) and keeps a Unix-socket client's address (the
// servers redsync's tests start themselves); in the watched runs it
// watches the client with one registry shared by all tests, to which one
// watchdog was attached before the first test. A watchdog.Attach that
// refuses (the version guard) ends the binary before any test, and the run
// fails saying so.
//
// redsync's suite runs each scenario on six kinds of pool. Only its go-redis
// v9 pool goes through go-redis hooks, so only that one is in scope: the
// runner narrows makeCases to the goredis_v9 case, removes the pool
// constructors and imports no longer used, drops the other pools' client
// libraries from the copy's go.mod, and starts redsync's tempredis servers
// without a TCP port (only the rueidis pool used one; the go-redis pool
// connects over the servers' Unix sockets). Its TestTryLock waits for
// TryLockContext to succeed in a loop that never calls it again, so one
// failed try (a quorum not reached in time on a loaded machine) hung the
// suite until its timeout: the loop calls it again, in the runs with
// lockwatch and without alike.
//
// # Timing
//
// Many upstream tests time locks in milliseconds, so on a busy machine a
// result can depend on timing with or without lockwatch. A difference that
// is not listed is tried again: the test alone, three times without
// lockwatch and three times with it; it fails the suite when a result with
// lockwatch never occurs without it, and is only logged otherwise (such a
// result is looked for up to 30 more times without lockwatch before it is
// blamed on lockwatch: some upstream tests fail now and then on their own
// timing; and, when the three tries with lockwatch did not give it again,
// up to 30 more times with lockwatch: a result that no try gives again,
// with lockwatch or without, was the run's timing and is logged as not
// judged). A listed difference that did not occur is tried
// again alone, up to 40 times, and fails the suite unless it occurs; one
// marked intermittent (its timing is rare on some machines) is only logged
// when it never does. A listed difference whose test failed without
// lockwatch in the run as well is tried again alone without lockwatch, up
// to 40 times, and must give its result without lockwatch at least once;
// one marked intermittent that never does is logged as not judged (the
// machine was too busy for the test, with lockwatch or without). So is a
// listed difference the other way round (without lockwatch the test gave
// the result listed for lockwatch, with lockwatch the one it gives
// without): it is not a difference lockwatch makes, and the listed one is
// then tried again alone as one that did not occur. The failures' first
// lines are logged once more at the end of the test, where a log cut to
// its last lines still shows them. The suites are built before any runs, and
// redislock's runs (locks of 5 to 100 ms) go one at a time before
// redsync's.
//
// # Running
//
// The test downloads modules and builds test binaries, so it runs only with
// LOCKWATCH_UPSTREAM_SUITES=1; like the other real-server tests it skips
// without redis-server unless LOCKWATCH_REQUIRE_REDIS=1:
//
//	LOCKWATCH_UPSTREAM_SUITES=1 LOCKWATCH_REQUIRE_REDIS=1 go test -count=1 -v -run TestUpstreamSuites ./reliability/upstream
//
// LOCKWATCH_UPSTREAM_DEBUG=lost makes the watched runs print every OnLost
// report into the tests' output; =log prints the watchdog's log as well.
package upstream
