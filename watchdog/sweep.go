package watchdog

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockwatch/lockwatch/registry"
	"github.com/lockwatch/lockwatch/scripts"
)

const (
	// pipeCalls is the number of renew script calls per pipeline.
	pipeCalls = 8
	// parallelPipes is how many pipelines of one client are in flight at once.
	parallelPipes = 4
	// tickTolerance covers the difference between the tick time the watchdog
	// predicts and the one cron keeps ("@every" rounds to whole seconds).
	tickTolerance = time.Second
)

// sweep renews locks of every watched client, each client on its own
// goroutine so that a slow or dead node delays no other. With plan nil it
// renews every tracked lock (a tick); otherwise the refs plan names.
func (w *Watchdog) sweep(ctx context.Context, now time.Time, plan map[redis.UniversalClient][]registry.Ref) []error {
	next := w.sched.Next(now)
	clients := w.reg.Clients()
	errs := make([][]error, len(clients))
	var wg sync.WaitGroup
	for i, c := range clients {
		var refs []registry.Ref
		if plan == nil {
			var held []registry.Lock
			refs, held = w.planAll(c, now)
			w.endHold(held)
		} else {
			refs = plan[c]
		}
		if len(refs) == 0 {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = w.renew(ctx, c, refs, next)
		}()
	}
	wg.Wait()
	w.sweeps.Add(1)
	return slices.Concat(errs...)
}

// planAll lists the locks of c to renew on a tick, and those past max hold.
func (w *Watchdog) planAll(c redis.UniversalClient, now time.Time) (refs []registry.Ref, held []registry.Lock) {
	w.reg.Range(c, func(l registry.Lock) bool {
		switch {
		case w.pastMaxHold(l, now):
			held = append(held, l)
		case w.o.filter == nil || w.o.filter(l):
			refs = append(refs, registry.Ref{Key: l.Key, Value: l.Value, TTL: l.TTL})
		}
		return true
	})
	return refs, held
}

func (w *Watchdog) pastMaxHold(l registry.Lock, now time.Time) bool {
	return w.o.maxHold > 0 && !now.Before(l.ObtainedAt.Add(w.o.maxHold))
}

// endHold untracks locks that reached max hold and reports them.
func (w *Watchdog) endHold(held []registry.Lock) {
	for _, l := range held {
		if dropped, ok := w.reg.Drop(l.Client, l.Key, l.Value); ok {
			w.report(dropped, ErrMaxHold)
		}
	}
}

// needsFast reports whether a lock confirmed at confirmed with ttl must be
// renewed before the tick at next: its deadline (a third of the TTL left,
// plus a twelfth as margin) comes before the tick.
func needsFast(ttl time.Duration, confirmed, next time.Time) bool {
	deadline := confirmed.Add(2*ttl/3 - ttl/12)
	return deadline.Before(next.Add(tickTolerance))
}

// retryDelay is how long the fast lane waits before retrying a failed renewal.
func retryDelay(ttl time.Duration) time.Duration {
	return min(max(ttl/10, 5*time.Millisecond), time.Second)
}

// outcome is what one pipeline found out.
type outcome struct {
	sent                         time.Time
	renewed, gone, taken, failed []registry.Ref
	err                          error
}

// renew renews refs of client c in chunked script calls, several per
// pipeline, a few pipelines at once, and records what Redis answered as
// each pipeline answers.
func (w *Watchdog) renew(ctx context.Context, c redis.UniversalClient, refs []registry.Ref, next time.Time) []error {
	chunk := w.o.chunkSize
	_, cluster := c.(*redis.ClusterClient)
	switch c.(type) {
	case *redis.ClusterClient:
		sortBySlot(refs)
	case *redis.Ring:
		chunk = 1 // a Ring routes a command by its first key only
	}
	group := chunk * pipeCalls
	var (
		wg   sync.WaitGroup
		sem  = make(chan struct{}, parallelPipes)
		mu   sync.Mutex // guards errs
		errs []error
	)
	for start := 0; start < len(refs); start += group {
		part := refs[start:min(start+group, len(refs))]
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			live, done := w.reg.Hold(c, part)
			if len(live) == 0 {
				done()
				return
			}
			out := w.attempt(ctx, c, live, chunk, cluster, done)
			w.record(c, out, next)
			if out.err != nil {
				mu.Lock()
				errs = append(errs, out.err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return errs
}

// attempt sends one pipeline and waits for it at most the pipeline's
// timeout, whatever the client does with context deadlines (go-redis
// applies them to socket reads only with ContextTimeoutEnabled; otherwise a
// dead connection blocks for its ReadTimeout). When the time is up the locks
// count as failed and are retried through the fast lane, on another
// connection, while the stuck pipeline finishes on its own goroutine (Stop
// waits for it). done, from Registry.Hold, is called when the pipeline has
// answered or the time is up. A pipeline still unanswered then has almost
// always been written already (it waits for a reply, not a socket), so
// holding releases back longer would stall them for nothing; if it is
// written later after all, it reaches a released key and changes nothing,
// as the renew script is owner-checked.
func (w *Watchdog) attempt(ctx context.Context, c redis.UniversalClient, live []registry.Ref, chunk int, cluster bool, done func()) outcome {
	defer done()
	timeout := w.timeoutFor(live)
	res := make(chan outcome, 1)
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		res <- w.send(ctx, c, live, chunk, cluster, timeout)
	}()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case out := <-res:
		return out
	case <-timer.C:
		w.failures.Add(1)
		return outcome{
			sent:   time.Now(),
			failed: live,
			err:    fmt.Errorf("watchdog: renewing %d locks: no answer within %v", len(live), timeout),
		}
	}
}

// send runs one pipeline of renew calls. It only talks to Redis: recording
// happens in record, after Registry.Hold's done.
func (w *Watchdog) send(ctx context.Context, c redis.UniversalClient, live []registry.Ref, chunk int, cluster bool, timeout time.Duration) outcome {
	chunks := splitChunks(live, chunk, cluster)
	ctx, cancel := context.WithTimeout(registry.WithoutTracking(ctx), timeout)
	defer cancel()
	type call struct {
		keys []string
		args []any
		cmd  *redis.Cmd
	}
	calls := make([]call, len(chunks))
	out := outcome{sent: time.Now()}
	pipe := c.Pipeline()
	for i, ch := range chunks {
		calls[i].keys, calls[i].args = renewArgs(ch)
		calls[i].cmd = scripts.Renew.EvalSha(ctx, pipe, calls[i].keys, calls[i].args...)
	}
	_, execErr := pipe.Exec(ctx)
	// A server that lost its script cache (restart, failover, SCRIPT FLUSH)
	// answers NOSCRIPT: send those chunks with the source, which reloads it.
	var again redis.Pipeliner
	for i := range calls {
		if redis.HasErrorPrefix(calls[i].cmd.Err(), "NOSCRIPT") {
			if again == nil {
				again = c.Pipeline()
			}
			calls[i].cmd = scripts.Renew.Eval(ctx, again, calls[i].keys, calls[i].args...)
		}
	}
	if again != nil {
		_, err := again.Exec(ctx)
		execErr = cmp.Or(err, execErr)
	}
	for i, cl := range calls {
		res, err := cl.cmd.Int64Slice()
		if cl.cmd.Err() == nil && cl.cmd.Val() == nil && execErr != nil {
			// go-redis leaves the commands untouched when it gets no
			// connection at all (pool timeout, cancelled context).
			err = execErr
		}
		if err == nil && len(res) != len(chunks[i]) {
			err = fmt.Errorf("watchdog: renew script answered %d results for %d keys", len(res), len(chunks[i]))
		}
		if err != nil {
			w.failures.Add(1)
			out.failed = append(out.failed, chunks[i]...)
			out.err = fmt.Errorf("watchdog: renewing %d locks: %w", len(chunks[i]), err)
			continue
		}
		for j, r := range res {
			switch r {
			case scripts.Renewed:
				out.renewed = append(out.renewed, chunks[i][j])
			case scripts.Gone:
				out.gone = append(out.gone, chunks[i][j])
			default:
				out.taken = append(out.taken, chunks[i][j])
			}
		}
	}
	return out
}

// record applies one pipeline's outcome to the registry and the fast lane.
func (w *Watchdog) record(c redis.UniversalClient, out outcome, next time.Time) {
	if len(out.renewed) > 0 {
		w.o.logger.Debug("watchdog: renewed", "locks", len(out.renewed), "rtt", time.Since(out.sent))
		w.reg.Confirm(c, out.sent, out.renewed)
		w.renewals.Add(int64(len(out.renewed)))
		w.mu.Lock()
		for _, ref := range out.renewed {
			r := lockRef{c, ref.Key}
			if needsFast(ref.TTL, out.sent, next) {
				if _, ok := w.fast[r]; !ok {
					// The fast lane may be idle or armed for later.
					w.wakeFor(out.sent.Add(ref.TTL / 3))
				}
				w.fast[r] = time.Time{}
			} else if len(w.fast) > 0 {
				delete(w.fast, r)
			}
		}
		w.mu.Unlock()
	}
	for _, ref := range out.gone {
		w.lose(c, ref, ErrLockGone)
	}
	for _, ref := range out.taken {
		w.lose(c, ref, ErrLockTaken)
	}
	if len(out.failed) == 0 {
		return
	}
	now := time.Now()
	w.o.logger.Warn("watchdog: renewal failed; retrying in the fast lane", "locks", len(out.failed), "err", out.err)
	type pending struct{ retryAt, due time.Time }
	retry := make(map[lockRef]pending, len(out.failed))
	for _, ref := range out.failed {
		l, ok := w.reg.Get(c, ref.Key)
		if !ok || l.Value != ref.Value {
			continue
		}
		if !now.Before(l.ConfirmedAt.Add(l.TTL)) {
			w.lose(c, ref, fmt.Errorf("%w: %w", ErrUnreachable, out.err))
			continue
		}
		at := now.Add(retryDelay(l.TTL))
		retry[lockRef{c, ref.Key}] = pending{at, w.due(l, at)}
	}
	if len(retry) > 0 {
		w.mu.Lock()
		for r, p := range retry {
			w.fast[r] = p.retryAt
			w.wakeFor(p.due)
		}
		w.mu.Unlock()
	}
}

// lose untracks a lock Redis says is no longer ours, and reports it.
func (w *Watchdog) lose(c redis.UniversalClient, ref registry.Ref, reason error) {
	if l, ok := w.reg.Drop(c, ref.Key, ref.Value); ok {
		w.report(l, reason)
	}
}

// report logs a lock the watchdog stopped renewing and calls OnLost.
func (w *Watchdog) report(l registry.Lock, reason error) {
	w.lost.Add(1)
	w.mu.Lock()
	delete(w.fast, lockRef{l.Client, l.Key})
	w.mu.Unlock()
	w.o.logger.Warn("watchdog: lock lost", "key", l.Key, "source", l.Source, "reason", reason)
	if w.o.onLost == nil {
		return
	}
	defer func() {
		if p := recover(); p != nil {
			w.o.logger.Error("watchdog: OnLost panicked", "key", l.Key, "panic", p)
		}
	}()
	w.o.onLost(l, reason)
}

func (w *Watchdog) timeoutFor(refs []registry.Ref) time.Duration {
	if w.o.timeout > 0 {
		return w.o.timeout
	}
	shortest := refs[0].TTL
	for _, r := range refs[1:] {
		shortest = min(shortest, r.TTL)
	}
	return min(max(shortest/4, 50*time.Millisecond), 5*time.Second)
}

// renewArgs builds the renew script's keys and arguments for one chunk.
func renewArgs(refs []registry.Ref) ([]string, []any) {
	keys := make([]string, len(refs))
	args := make([]any, 2*len(refs))
	for i, r := range refs {
		keys[i] = r.Key
		args[2*i] = r.Value
		args[2*i+1] = max(r.TTL.Milliseconds(), 1)
	}
	return keys, args
}

// splitChunks cuts refs into chunks of at most size; on a cluster a chunk
// never spans two hash slots (refs must be sorted by slot).
func splitChunks(refs []registry.Ref, size int, cluster bool) [][]registry.Ref {
	var out [][]registry.Ref
	for len(refs) > 0 {
		n := min(size, len(refs))
		if cluster {
			s := slotOf(refs[0].Key)
			for i := 1; i < n; i++ {
				if slotOf(refs[i].Key) != s {
					n = i
					break
				}
			}
		}
		out = append(out, refs[:n:n])
		refs = refs[n:]
	}
	return out
}

func sortBySlot(refs []registry.Ref) {
	type slotted struct {
		slot uint16
		ref  registry.Ref
	}
	tmp := make([]slotted, len(refs))
	for i, r := range refs {
		tmp[i] = slotted{slotOf(r.Key), r}
	}
	slices.SortStableFunc(tmp, func(a, b slotted) int { return cmp.Compare(a.slot, b.slot) })
	for i := range tmp {
		refs[i] = tmp[i].ref
	}
}
