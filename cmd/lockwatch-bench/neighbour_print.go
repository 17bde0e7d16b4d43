package main

import (
	"fmt"
	"io"

	"github.com/lockwatch/lockwatch/watchdog"
)

func printNeighbour(w io.Writer, r *neighbourResult) {
	if r == nil {
		return
	}
	fmt.Fprintf(w, "\nneighbour: %d redislock locks (%.0f s TTL, %s) on one watched client; watchdog on %q attached in half of %d alternating blocks of %.1f s (W U U W ...), stopped in the others;\n",
		r.Locks, r.TTLS, valuesNote(r.ValueBytes), r.Schedule, r.Blocks, r.BlockS)
	if r.IntervalMS > 0 {
		fmt.Fprintf(w, "  on the same client: %d streams of GET/SET, each on a key of its own, a command due every %.2f ms, sent on a goroutine of its own and timed from when it was due (%.0f ms timeout);\n",
			r.AppStreams, r.IntervalMS, r.CommandTimeoutMS)
	} else {
		fmt.Fprintf(w, "  on the same client: %d goroutines doing GET/SET back to back, each on a key of its own, each command timed alone (%.0f ms timeout);\n", r.AppStreams, r.CommandTimeoutMS)
	}
	fmt.Fprintf(w, "  %d streams like those release a held lock picked at random (then obtain it again, untimed); PING: an unrelated client, connections of its own in another process, one stream like those;\n",
		r.Releasers)
	fmt.Fprintf(w, "  commands due within %.0f ms after Attach or Stop returned are not counted\n", r.SettleMS)
	tw := newTable(w)
	fmt.Fprintln(tw, "pool\tlockwatch\tsweeps\tapp n\tapp p50 ms\tp99\tmax\terrors\tpool timeouts\tp99 in sweeps\tPING p50\tp99\tmax\tRelease n\tRelease p50\tp99\tmax\terrors\tp99 in sweeps\t")
	for _, p := range r.Pools {
		name := fmt.Sprintf("%s (%d, %.0fs)", p.Pool, p.PoolSize, p.PoolTimeoutMS/1000)
		for _, m := range []struct {
			label string
			f     neighbourMode
		}{{modeWith, p.With}, {modeWithout, p.Without}} {
			inApp, inRel := "-", "-"
			if s := m.f.AppDuringSweeps; s != nil && s.Count > 0 {
				inApp = fmt.Sprintf("%.2f (%d)", s.P99MS, s.Count)
			}
			if s := m.f.ReleaseDuringSweeps; s != nil && s.Count > 0 {
				inRel = fmt.Sprintf("%.2f (%d)", s.P99MS, s.Count)
			}
			a, pg, rl := m.f.App, m.f.Ping, m.f.Release
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%.2f\t%.2f\t%.1f\t%d\t%d\t%s\t%.2f\t%.2f\t%.1f\t%d\t%.2f\t%.2f\t%.1f\t%d\t%s\t\n",
				name, m.label, m.f.Sweeps, a.Count, a.P50MS, a.P99MS, a.MaxMS, a.Errors, m.f.PoolTimeouts, inApp,
				pg.P50MS, pg.P99MS, pg.MaxMS, rl.Count, rl.P50MS, rl.P99MS, rl.MaxMS, rl.Errors, inRel)
			name = ""
		}
	}
	_ = tw.Flush()
	verdict := func(rise float64) string {
		if rise <= r.BudgetMS {
			return "ok"
		}
		return "OVER"
	}
	for _, p := range r.Pools {
		appVerdict := verdict
		if failed := p.Without.App.Errors + p.Without.Release.Errors; failed > 0 {
			// The application could not keep up with its own load on
			// this client without lockwatch (on 2026-11-30, a pool of
			// four filled by the open loop): there is no baseline to
			// compare with.
			appVerdict = func(float64) string {
				return fmt.Sprintf("NOT JUDGED (%d of the application's commands failed without lockwatch)", failed)
			}
		}
		fmt.Fprintf(w, "  %s pool: p99 rise with lockwatch (budget %.0f ms): app %+.2f ms %s, PING %+.2f ms %s, Release %+.2f ms %s; sweep %.0f ms (median of %d), %d renewals, %d lost%s, %.1f s to obtain;%s load average %.1f before, %.1f after\n",
			p.Pool, r.BudgetMS, p.AppP99RiseMS, appVerdict(p.AppP99RiseMS), p.PingP99RiseMS, verdict(p.PingP99RiseMS),
			p.ReleaseP99RiseMS, appVerdict(p.ReleaseP99RiseMS), p.SweepMS, len(p.SweepsMS), p.Renewals, p.Lost, lossCauses(p.Lost, p.Losses), p.ObtainS, p.Trouble, p.LoadAvg[0], p.LoadAvg[1])
	}
	for _, p := range r.Pools {
		fmt.Fprintf(w, "  %s pool, p99 per block, app/PING ms:", p.Pool)
		for _, b := range p.Blocks {
			fmt.Fprintf(w, " %s %.1f/%.1f", map[string]string{modeWith: "W", modeWithout: "U"}[b.Mode], b.AppP99MS, b.PingP99MS)
		}
		fmt.Fprintln(w)
		with, without := blockP99s(p.Blocks, modeWith), blockP99s(p.Blocks, modeWithout)
		if len(with) > 0 && len(without) > 0 {
			// One stall of the host in one block moves the p99 of all
			// the commands of its mode: the blocks' median is not moved
			// by it.
			fmt.Fprintf(w, "  %s pool, median of the blocks' app p99: %.2f ms with lockwatch, %.2f without (%+.2f)\n", p.Pool, median(with), median(without), median(with)-median(without))
		}
	}
	fmt.Fprintln(w, "  errors: app commands that failed (timeouts included); pool timeouts: the client's PoolStats().Timeouts, the watchdog's waits included; p99 in sweeps: of the commands begun while a sweep ran (their number)")
}

// lossCauses says what the watchdog gave its lost locks up for, when it
// lost any.
func lossCauses(lost int64, l watchdog.Losses) string {
	if lost == 0 {
		return ""
	}
	return fmt.Sprintf(" (%d gone, %d taken, %d unreachable, %d max hold)", l.Gone, l.Taken, l.Unreachable, l.MaxHold)
}

// String says what went wrong, when anything did.
func (t nbTrouble) String() string {
	if t == (nbTrouble{}) {
		return ""
	}
	s := fmt.Sprintf(" failed pipelines %d, hedges %d, failed calls %d, deadlines missed %d, holders told %d, calls on own connections %d", t.Failures, t.Hedges, t.RenewErrors, t.Missed, t.Unconfirmed, t.SpareCalls)
	if t.LastError != "" {
		s += fmt.Sprintf(", last error %q", t.LastError)
	}
	return s + ";"
}

// blockP99s returns the application's p99 of each block of mode.
func blockP99s(blocks []nbBlock, mode string) []float64 {
	var v []float64
	for _, b := range blocks {
		if b.Mode == mode {
			v = append(v, b.AppP99MS)
		}
	}
	return v
}
