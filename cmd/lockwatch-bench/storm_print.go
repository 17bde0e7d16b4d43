package main

import (
	"fmt"
	"io"
	"strings"
)

// valuesNote says how long the lock values are.
func valuesNote(n int) string {
	if n == 0 {
		return "the library's own values"
	}
	return fmt.Sprintf("%d-byte values", n)
}

func printStorm(w io.Writer, r *stormResult) {
	if r == nil {
		return
	}
	fmt.Fprintf(w, "\nstorm: %d %s locks of %.2f s (%s) obtained in a burst by %d goroutines, then a third released and obtained again every %.1f s, for %.1f s; default watchdog schedule; every lock renewed each third of its TTL is %.0f renewals/s;\n",
		r.Locks, r.Lib, r.TTLS, valuesNote(r.ValueBytes), r.Workers, r.WaveS, r.DurationS, r.NeededPerSec)
	fmt.Fprintf(w, "  on the same client: %d goroutines of GET/SET back to back (closed loop, each command timed alone) and one stream with a command due every %.2f ms (open loop, timed from when it was due); %.0f ms timeout;\n",
		r.ClosedLoop, r.OpenEveryMS, r.TimeoutMS)
	poll := "no poller"
	if r.PollS > 0 {
		poll = fmt.Sprintf("a poller reads every held lock's key every %.2f s through a client of its own", r.PollS)
	}
	fmt.Fprintf(w, "  %s; without lockwatch the client is not watched and the locks expire (their losses are expected: only the latency is compared)\n", poll)
	tw := newTable(w)
	fmt.Fprintln(tw, "pool\tround\tlockwatch\theld\tlost\tOnLost\tat release\tpoll gone\tpoll other\trenewals\tper s\tfailures\tclosed p50 ms\tp99\tmax\topen p50\tp99\tmax\tobtain p50\tp99\trelease p50\tp99\terrors\tpool timeouts\tburst s\tclient CPU s\tRedis CPU s\t")
	for _, p := range r.Pools {
		name := p.Pool
		for k, rd := range p.Rounds {
			for _, run := range []stormRun{rd.With, rd.Without} {
				if run.Mode == "" {
					continue
				}
				if run.Pool != "" && k == 0 && name != "" {
					name = fmt.Sprintf("%s (%d, %.0fs)", run.Pool, run.PoolSize, run.PoolTimeoutMS/1000)
				}
				renewals, perSec, failures := "-", "-", "-"
				if wd := run.Watchdog; wd != nil {
					renewals, perSec, failures = fmt.Sprint(wd.Renewals), fmt.Sprintf("%.0f", wd.RenewalsPerSec), fmt.Sprint(wd.Failures)
				}
				c, o, f := run.Closed, run.Open, run.Found
				fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t%.2f\t%.2f\t%.1f\t%.2f\t%.2f\t%.1f\t%.2f\t%.2f\t%.2f\t%.2f\t%d\t%d\t%.2f\t%.1f\t%.1f\t\n",
					name, k+1, run.Mode, run.Held, run.Lost, f.OnLost, f.Release, f.PollGone, f.PollOther, renewals, perSec, failures,
					c.P50MS, c.P99MS, c.MaxMS, o.P50MS, o.P99MS, o.MaxMS, run.Obtain.P50MS, run.Obtain.P99MS, run.Release.P50MS, run.Release.P99MS, c.Errors+o.Errors, run.PoolTimeouts, run.BurstS, run.ClientCPUS, run.ServerCPUS)
				name = ""
			}
		}
	}
	_ = tw.Flush()
	for _, p := range r.Pools {
		printStormPool(w, r, p)
	}
	fmt.Fprintln(w, "  lost: each lock once, whoever found it (OnLost, its release finding it not held, the poller finding its key gone or another value there); errors: app commands that failed (timeouts included); obtain and release: the waves' lock commands, each try timed alone; late pipelines: renewals sent with their most urgent lock at a third of its TTL or less")
}

// printStormPool prints one pool configuration's verdicts and, for each
// round, the watchdog's figures.
func printStormPool(w io.Writer, r *stormResult, p stormPool) {
	verdict := func(rise float64) string {
		if rise <= r.BudgetMS {
			return "ok"
		}
		return "OVER"
	}
	var closed, open, locks []string
	for _, rd := range p.Rounds {
		closed = append(closed, fmt.Sprintf("%+.2f", rd.ClosedP99RiseMS))
		open = append(open, fmt.Sprintf("%+.2f", rd.OpenP99RiseMS))
		locks = append(locks, fmt.Sprintf("%+.2f/%+.2f", rd.ObtainP99RiseMS, rd.ReleaseP99RiseMS))
	}
	fmt.Fprintf(w, "  %s pool: p99 rise with lockwatch, median of %d rounds (budget %.0f ms): closed loop %+.2f ms %s, open loop %+.2f ms %s (rounds: closed %s; open %s); with lockwatch %d of %d held lost\n",
		p.Pool, len(p.Rounds), r.BudgetMS, p.ClosedP99RiseMS, verdict(p.ClosedP99RiseMS), p.OpenP99RiseMS, verdict(p.OpenP99RiseMS),
		strings.Join(closed, " "), strings.Join(open, " "), p.Lost, p.Held)
	fmt.Fprintf(w, "    the waves' lock commands, p99 rise (median of the rounds): obtain %+.2f ms, release %+.2f ms (rounds, obtain/release: %s)\n",
		p.ObtainP99RiseMS, p.ReleaseP99RiseMS, strings.Join(locks, " "))
	for k, rd := range p.Rounds {
		with := rd.With
		fmt.Fprintf(w, "    round %d: with lockwatch %d of %d held lost", k+1, with.Lost, with.Held)
		if wd := with.Watchdog; wd != nil {
			fmt.Fprintf(w, " (watchdog: %d gone, %d taken, %d unreachable)", wd.Gone, wd.Taken, wd.Unreachable)
		}
		fmt.Fprintf(w, ", without %d of %d\n", rd.Without.Lost, rd.Without.Held)
		if wd := with.Watchdog; wd != nil {
			fmt.Fprintf(w, "      watchdog: %d renewals (%.0f/s of %.0f/s needed), %d failed pipelines, %d renew errors, fast lane at most %d, %d pipelines, %d late, least headroom %.2f\n",
				wd.Renewals, wd.RenewalsPerSec, r.NeededPerSec, wd.Failures, wd.RenewErrors, wd.FastLaneMax, wd.Pipelines, wd.Late, wd.LeastHeadroom)
			fmt.Fprintf(w, "      watchdog: %d deadlines missed, %d hedged calls, %d holders told a lock may be lost, %d calls on its own connections\n", wd.DeadlinesMissed, wd.Hedges, wd.Unconfirmed, wd.SpareCalls)
			if wd.LastError != "" {
				fmt.Fprintf(w, "      watchdog: last renewal error %q\n", wd.LastError)
			}
		}
		for _, run := range []stormRun{with, rd.Without} {
			var waves []string
			for _, s := range run.WavesS {
				waves = append(waves, fmt.Sprintf("%.2f", s))
			}
			extra := ""
			if f := run.Found; f.OnLostHeld+f.OnLostUnknown > 0 {
				extra = fmt.Sprintf("; OnLost of locks whose release found them held (false reports): %d, of unknown values: %d", f.OnLostHeld, f.OnLostUnknown)
			}
			if run.StopHung {
				extra += fmt.Sprintf("; wd.Stop() HUNG: not returned %v after the last release", stormStopWait)
			}
			fmt.Fprintf(w, "      %s: burst %.2f s, waves %s s; %d obtains and %d releases failed; %d polls; load average %.1f before, %.1f after%s\n",
				run.Mode, run.BurstS, strings.Join(waves, " "), run.ObtainFailed, run.ReleaseErrors, run.Polls, run.LoadAvg[0], run.LoadAvg[1], extra)
		}
	}
}
