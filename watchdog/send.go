package watchdog

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// launch holds p's entries, builds its calls and sends it on a goroutine of
// its own. The watchdog waits for the answer at most the renewal timeout;
// then it gives the pipeline up: its entries count as failed and are
// retried, while the pipeline ends on its own (go-redis ignores context
// deadlines on socket reads unless ContextTimeoutEnabled) and goes back to
// the pool when it does. A given-up pipeline that reaches Redis later
// changes nothing that is not ours: the script is owner-checked and never
// shortens a TTL on Redis 7. sweep says whether the pipeline counts
// against the sweep's share.
func (l *lane) launch(p *pipe, run *sweepRun, sweep bool) {
	w, t := l.w, l.c.t
	t.Lock()
	p.entries = t.HoldLocked(p.entries)
	if len(p.entries) > 0 {
		order(p.entries)
		p.build(t, l.c.chunk, w.set.Since(time.Now()))
	}
	t.Unlock()
	if len(p.entries) == 0 {
		l.putPipe(p)
		if sweep {
			l.sweepEnded()
		}
		return
	}
	if l.shard != "" {
		if sc := l.c.shardClient(l.shard); sc != nil {
			p.to = sc
		} else {
			p.toErr = fmt.Errorf("watchdog: ring shard %s is not live", l.shard)
		}
	}
	if run != nil {
		run.wg.Add(1)
		p.done = run.done
	}
	timeout := w.timeoutFor(p.ttls)
	// A renewal is waited for no longer than its locks have left: past
	// that they may have expired, and the due loop decides (an answer that
	// comes later is still applied).
	if left := time.Duration(p.left); left < timeout {
		timeout = max(left, minWait)
	}
	p.state.Store(pipeRunning)
	w.io.Add(1)
	go func() {
		defer w.io.Done()
		timer := time.AfterFunc(timeout, func() { l.abandon(p, errNoAnswer{timeout}, sweep) })
		stop := context.AfterFunc(w.ctx, func() { l.abandon(p, ErrStopped, sweep) })
		p.run(w.ctx, t, pipelineDeadline(timeout))
		timer.Stop()
		stop()
		if !p.end() {
			// Given up waiting: its entries were retried then. Its answer
			// is the truth about Redis all the same, and is applied; its
			// error, when it has one, says more than "no answer in time".
			if p.err != nil {
				l.lateError(p.err)
			}
			if w.ctx.Err() == nil {
				l.settleLate(p)
			} else {
				t.EndLate(p.entries)
			}
			l.putPipe(p)
			return
		}
		if sweep {
			l.sweepEnded()
		}
		done := p.done
		err := l.settle(p)
		l.putPipe(p)
		if done != nil {
			done(err)
		}
	}()
}

// abandon gives p up when it has not answered in time, or the watchdog
// stops: its entries count as failed (retried) and are no longer in flight,
// so that the holder's commands about them need not wait.
func (l *lane) abandon(p *pipe, cause error, sweep bool) {
	p.mu.Lock()
	if !p.state.CompareAndSwap(pipeRunning, pipeAbandoned) {
		p.mu.Unlock()
		return
	}
	es := slices.Clone(p.entries) // p stays in use by its pipeline
	done := p.done
	calls := len(p.ends)
	p.mu.Unlock()
	l.c.t.Release(es)
	if sweep {
		l.sweepEnded()
	}
	if !errors.Is(cause, ErrStopped) {
		l.w.failures.Add(1)
		l.w.renewErrors.Add(int64(calls))
		l.failed.Add(int64(len(es)))
		l.w.each(func(o Observer) { o.RenewFailed(l.name, calls, cause) })
		l.fail(es, cause)
	}
	if done != nil {
		done(cause)
	}
}
