// Package harness is what lockwatch's end-to-end suites share: the
// compatibility suite at the module's root and the reliability packages
// (reliability/...). It holds the application of the README's start-up
// contract ([App]: a registry with both adapters watching the application's
// clients, a watchdog attached with an OnLost that records and a logger
// shown when the test fails), locks obtained through the upstream libraries
// as business code obtains them ([Held], [Obtain]), reading keys from
// outside through clients no registry watches ([ReadKeys]), and the records
// the scenarios judge by ([Log], [LostLog], [SentLog], [LockedBuffer],
// [Matching]).
//
// What a single scenario needs stays in its package; this package keeps
// only what at least two of them use in the same way.
//
// The package is internal: only lockwatch's own tests use it. Its helpers
// take a testing.TB and fail the test rather than return errors where a
// test could do nothing else with one.
package harness
