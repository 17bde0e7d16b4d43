package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"testing"

	"github.com/lockwatch/lockwatch/internal/testkit/harness"
	"github.com/lockwatch/lockwatch/internal/testkit/testredis"
)

// The storm case, tiny, end to end on a real server, with each library
// (redsync with long values): every run of both pools answers with its
// rows, lockwatch renewed in the runs with it and not in the others, and
// the loss count can count: without lockwatch, the third of the locks of
// 2 s that no wave takes again is held over the whole 3 s run, expires,
// and its releases must find that. A smoke test run under -race on a
// loaded machine: the timing figures (latency, losses with lockwatch) are
// the bench's to report, not this test's to judge. (With locks of 600 ms,
// under -race on a machine with a load average of 8, every renewal
// pipeline of a run once went unanswered within its 150 ms and nothing was
// renewed.)
func TestRunStorm(t *testing.T) {
	harness.SkipShort(t, "runs the storm case end to end, four runs of 3 s (the -race suite runs it)")
	srv := testredis.Start(t)
	for _, tc := range []struct {
		lib, valueBytes string
		rounds          int
	}{{"redislock", "0", 2}, {"redsync", "4096", 1}} {
		t.Run(tc.lib, func(t *testing.T) {
			var out, errb bytes.Buffer
			err := run([]string{"-json", "-redis", srv.Addr, "-cases", "storm", "-hook-rounds", "1", "-storm-lib", tc.lib,
				"-storm-locks", "300", "-storm-ttl", "2s", "-storm-duration", "3s", "-storm-wave", "1200ms", "-storm-poll", "200ms",
				"-value-bytes", tc.valueBytes, "-storm-rounds", strconv.Itoa(tc.rounds)}, &out, &errb)
			if err != nil {
				t.Fatalf("run: %v\n%s", err, errb.String())
			}
			var rep struct {
				Storm *stormResult `json:"storm"`
			}
			if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
				t.Fatalf("stdout is not one JSON object: %v\n%s", err, out.String())
			}
			checkStorm(t, rep.Storm, tc.lib, tc.rounds)
		})
	}
}

// checkStorm checks a storm report of 300 locks over 3 s, waves every
// 1.2 s, in rounds.
func checkStorm(t *testing.T, r *stormResult, lib string, rounds int) {
	t.Helper()
	if r == nil {
		t.Fatal("no storm object")
	}
	if r.Locks != 300 || r.Lib != lib || len(r.Pools) != len(neighbourPools) || r.Rounds != rounds {
		t.Fatalf("storm: %d %s locks, %d pools, %d rounds; want 300 %s, %d pools, %d rounds", r.Locks, r.Lib, len(r.Pools), r.Rounds, lib, len(neighbourPools), rounds)
	}
	for i, p := range r.Pools {
		if p.Pool != neighbourPools[i] {
			t.Errorf("storm pool %d = %q, want %q", i, p.Pool, neighbourPools[i])
		}
		if len(p.Rounds) != rounds {
			t.Fatalf("storm %s pool: %d rounds, want %d", p.Pool, len(p.Rounds), rounds)
		}
		var closed, open, release []float64
		var lost, held int64
		for k, rd := range p.Rounds {
			checkStormRound(t, fmt.Sprintf("%s pool, round %d", p.Pool, k+1), p.Pool, rd)
			closed, open = append(closed, rd.ClosedP99RiseMS), append(open, rd.OpenP99RiseMS)
			release = append(release, rd.ReleaseP99RiseMS)
			lost, held = lost+rd.With.Lost, held+rd.With.Held
		}
		if want := (release[0] + release[len(release)-1]) / 2; len(release) <= 2 && p.ReleaseP99RiseMS != want {
			t.Errorf("storm %s pool: release p99 rise %v of rounds %v, want their median %v", p.Pool, p.ReleaseP99RiseMS, release, want)
		}
		// The medians, worked out here: one round's rise, or the mean of two.
		if want := (closed[0] + closed[len(closed)-1]) / 2; len(closed) <= 2 && p.ClosedP99RiseMS != want {
			t.Errorf("storm %s pool: closed p99 rise %v of rounds %v, want their median %v", p.Pool, p.ClosedP99RiseMS, closed, want)
		}
		if want := (open[0] + open[len(open)-1]) / 2; len(open) <= 2 && p.OpenP99RiseMS != want {
			t.Errorf("storm %s pool: open p99 rise %v of rounds %v, want their median %v", p.Pool, p.OpenP99RiseMS, open, want)
		}
		if p.Lost != lost || p.Held != held {
			t.Errorf("storm %s pool: %d of %d lost with lockwatch, want the rounds' sums %d of %d", p.Pool, p.Lost, p.Held, lost, held)
		}
	}
}

// checkStormRound checks one round of a pool of a storm report of 300
// locks over 3 s, waves every 1.2 s.
func checkStormRound(t *testing.T, name, pool string, p stormRound) {
	t.Helper()
	for _, run := range []stormRun{p.With, p.Without} {
		name := name + ", " + run.Mode
		if run.Pool != pool {
			t.Errorf("storm %s: run of pool %q", name, run.Pool)
		}
		// The burst's 300, then waves of 100: two, at 1.2 s and 2.4 s,
		// unless the machine held one up past the run's 3 s; none only
		// when the burst itself took the whole run (CI, four test
		// binaries at once under -race on a loaded machine).
		// An obtain that fails after its tries is counted, not held;
		// none may fail unless the burst itself took the whole run (CI
		// run 39 under two CPU burners: redsync's obtains, each
		// allowed a fifth of the 2 s expiry, failed 13 times in a burst
		// of 10.9 s, without lockwatch). Nor more than a tenth of the
		// burst's otherwise: a redsync obtain allowed 400 ms may time
		// out in a burst that is quick as a whole (CI run 104, under
		// -race beside two burners: 6 failed in a burst of 1.41 s,
		// without lockwatch).
		minWaves, maxFailed := 1, int64(30)
		if run.BurstS >= 3 {
			minWaves, maxFailed = 0, 300
		}
		if w := len(run.WavesS); run.Held+run.ObtainFailed != int64(300+100*w) || run.ObtainFailed > maxFailed || w < minWaves || w > 2 {
			t.Errorf("storm %s: %d held, %d obtains failed, %d waves after a burst of %.2fs; want 300 and 100 a wave held or failed, at most %d failed, %d to 2 waves",
				name, run.Held, run.ObtainFailed, w, run.BurstS, maxFailed, minWaves)
		}
		if run.ObtainFailed > 0 {
			t.Logf("storm %s: %d obtains failed in a burst of %.2fs (an overloaded machine)", name, run.ObtainFailed, run.BurstS)
		}
		if run.Closed.Count == 0 || run.Open.Count == 0 || run.Polls == 0 {
			t.Errorf("storm %s: %d closed-loop and %d open-loop commands, %d polls; want some of each", name, run.Closed.Count, run.Open.Count, run.Polls)
		}
		lats := []latency{run.Closed, run.Open}
		// Each wave's 100 releases and 100 obtains are timed, each try.
		if w := len(run.WavesS); run.Obtain.Count < 100*w || run.Release.Count < 100*w {
			t.Errorf("storm %s: %d obtains and %d releases timed in %d waves; want 100 of each a wave at least", name, run.Obtain.Count, run.Release.Count, w)
		} else if w > 0 {
			lats = append(lats, run.Obtain, run.Release)
		}
		for _, l := range lats {
			if l.P50MS <= 0 || l.P99MS < l.P50MS || l.MaxMS < l.P99MS {
				t.Errorf("storm %s: p50 %v, p99 %v, max %v ms; want 0 < p50 <= p99 <= max", name, l.P50MS, l.P99MS, l.MaxMS)
			}
		}
		if run.Lost > run.Held {
			t.Errorf("storm %s: %d lost of %d held", name, run.Lost, run.Held)
		}
	}
	if wd := p.With.Watchdog; p.With.Mode != modeWith || wd == nil || wd.Renewals == 0 || wd.Pipelines == 0 {
		t.Errorf("storm %s with lockwatch: mode %q, watchdog %+v; want renewals", name, p.With.Mode, wd)
	}
	if p.Without.Mode != modeWithout || p.Without.Watchdog != nil {
		t.Errorf("storm %s without lockwatch: mode %q, watchdog %+v; want none", name, p.Without.Mode, p.Without.Watchdog)
	}
	// Unrenewed, the burst's locks of the third no wave took again
	// expired before the final release (3 s after the burst began)
	// when the burst obtained them a TTL (2 s) before that. A slower
	// burst leaves its last ones held (CI run 25: 95 of them expired):
	// then some, not all.
	if w, want := p.Without, int64(100); w.Lost < want || w.Found.Release < want {
		if w.BurstS > 1 {
			want = 1
		}
		if w.Lost < want || w.Found.Release < want {
			t.Errorf("storm %s without lockwatch: %d lost, %d found at release after a burst of %.2f s; want at least %d (locks of 2 s held 3 s)", name, w.Lost, w.Found.Release, w.BurstS, want)
		}
	}
	if rise := p.With.Closed.P99MS - p.Without.Closed.P99MS; p.ClosedP99RiseMS != rise {
		t.Errorf("storm %s: closed p99 rise %v, want with minus without, %v", name, p.ClosedP99RiseMS, rise)
	}
	if rise := p.With.Open.P99MS - p.Without.Open.P99MS; p.OpenP99RiseMS != rise {
		t.Errorf("storm %s: open p99 rise %v, want with minus without, %v", name, p.OpenP99RiseMS, rise)
	}
	if rise := p.With.Obtain.P99MS - p.Without.Obtain.P99MS; p.ObtainP99RiseMS != rise {
		t.Errorf("storm %s: obtain p99 rise %v, want with minus without, %v", name, p.ObtainP99RiseMS, rise)
	}
	if rise := p.With.Release.P99MS - p.Without.Release.P99MS; p.ReleaseP99RiseMS != rise {
		t.Errorf("storm %s: release p99 rise %v, want with minus without, %v", name, p.ReleaseP99RiseMS, rise)
	}
}
