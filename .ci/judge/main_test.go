package main

import (
	"testing"
	"time"
)

// TestFailedTestsAndStalls: a failed test is excused only by a stall
// while its package ran, which go test's FAIL line dates: the package
// ends with the line, and began the time it gives (and a second) before.
func TestFailedTestsAndStalls(t *testing.T) {
	start := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return start.Add(time.Duration(s * float64(time.Second))) }
	out := []line{
		{at(10), "--- FAIL: TestA (1.00s)"},
		{at(10), "FAIL\texample.com/a\t5.000s"}, // ran from +4 to +10
		{at(20), "ok  \texample.com/b\t3.000s"},
		{at(100), "--- FAIL: TestC (2.00s)"},
		{at(100), "--- FAIL: TestD (2.00s)"},
		{at(100), "FAIL\texample.com/c\t30.000s"}, // from +69 to +100
	}
	fails, why := failedTests(out, start)
	if why != "" || len(fails) != 3 {
		t.Fatalf("failedTests = %v, %q; want three failures", fails, why)
	}
	if f := fails[0]; f.test != "TestA" || f.pkg != "example.com/a" || !f.from.Equal(at(4)) || !f.to.Equal(at(10)) {
		t.Errorf("fails[0] = %+v, want TestA of example.com/a from +4s to +10s", f)
	}
	if f := fails[2]; f.test != "TestD" || f.pkg != "example.com/c" || !f.from.Equal(at(69)) {
		t.Errorf("fails[2] = %+v, want TestD of example.com/c from +69s", f)
	}

	stalls := []stall{{at(50), 800 * time.Millisecond}, {at(3.9), 300 * time.Millisecond}}
	if s, ok := stallDuring(stalls, fails[0]); !ok || s.dur != 300*time.Millisecond {
		t.Errorf("stallDuring(TestA) = %+v, %v; want the stall of 300ms that ran into its package", s, ok)
	}
	// The longest stall of the run came between the packages: it excuses
	// neither.
	if s, ok := stallDuring(stalls[:1], fails[0]); ok {
		t.Errorf("stallDuring(TestA) = %+v, true; want none: the stall at +50s came after its package", s)
	}
	if s, ok := stallDuring(stalls, fails[1]); ok {
		t.Errorf("stallDuring(TestC) = %+v, true; want none: its package ran from +69s", s)
	}

	// A FAIL line without a time: the package ran from the start.
	fails, _ = failedTests([]line{{at(30), "--- FAIL: TestE (0.10s)"}, {at(30), "FAIL\texample.com/e [setup failed]"}}, start)
	if len(fails) != 1 || !fails[0].from.Equal(start) {
		t.Errorf("failedTests without a time = %+v, want one failure from the start", fails)
	}
	if _, ok := stallDuring(stalls, fails[0]); !ok {
		t.Error("stallDuring(TestE) = false, want the stall at +3.9s")
	}

	for _, bad := range [][]line{
		{{at(1), "panic: boom"}, {at(1), "FAIL\texample.com/p\t0.1s"}},
		{{at(1), "FAIL\texample.com/q\t0.1s"}},
		{{at(1), "ok  \texample.com/r\t0.1s"}},
	} {
		if fails, why := failedTests(bad, start); why == "" {
			t.Errorf("failedTests(%v) = %v, no reason; want it judged as it is", bad, fails)
		}
	}
}
