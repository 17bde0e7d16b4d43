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
	// pipelineCalls is the number of full renew script calls per pipeline
	// (more when chunks are cut short at slot boundaries).
	pipelineCalls = 2
	// parallelPipes is how many pipelines of one client (of one node, on a
	// cluster) are in flight at once.
	parallelPipes = 6
	// tickTolerance covers the difference between the tick time the watchdog
	// predicts and the one the tick really starts at (cron wakes a little
	// late, and a sweep takes a while to reach every lock).
	tickTolerance = time.Second
)

// sweep renews locks of every watched client, each client on its own
// goroutine so that a slow or dead node delays no other. With plan nil it
// renews every tracked lock (a tick), listed and renewed sweepBatch locks
// at a time, so that a sweep of a million locks does not keep a list of
// them all; otherwise the refs plan names.
func (w *Watchdog) sweep(ctx context.Context, now time.Time, plan map[redis.UniversalClient][]registry.Ref) []error {
	next := w.sched.Next(now)
	clients := w.reg.Clients()
	errs := make([][]error, len(clients))
	var wg sync.WaitGroup
	for i, c := range clients {
		if plan != nil && len(plan[c]) == 0 {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if plan != nil {
				errs[i] = w.renew(ctx, c, plan[c], 0, next)
				return
			}
			var heldSince time.Time
			if w.o.maxHold > 0 {
				heldSince = now.Add(-w.o.maxHold)
			}
			gen := w.reg.Generation(c) // before planning: see HoldSince
			w.reg.PlanBatches(c, heldSince, w.o.filter, sweepBatch, func(refs, held []registry.Ref) bool {
				if len(held) > 0 {
					w.endHold(c, held)
				}
				if len(refs) > 0 {
					groupByTTL(refs)
					errs[i] = append(errs[i], w.renew(ctx, c, refs, gen, next)...)
				}
				return ctx.Err() == nil
			})
		}()
	}
	wg.Wait()
	w.sweeps.Add(1)
	return slices.Concat(errs...)
}

// sweepBatch is how many locks of a client a tick lists and renews at a
// time.
const sweepBatch = 1 << 17

func (w *Watchdog) pastMaxHold(l registry.Lock, now time.Time) bool {
	return w.o.maxHold > 0 && !now.Before(l.ObtainedAt.Add(w.o.maxHold))
}

// endHold untracks locks that reached max hold and reports them.
func (w *Watchdog) endHold(c redis.UniversalClient, held []registry.Ref) {
	for _, ref := range held {
		if dropped, ok := w.reg.Drop(c, ref.Key, ref.Value); ok {
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
	sent                time.Time
	renewed             [][]registry.Ref // chunk by chunk: a whole chunk when all were renewed
	gone, taken, failed []registry.Ref
	err                 error
}

// renew renews refs of client c in chunked script calls, a few per
// pipeline, several pipelines at once, and records what Redis answered as
// each pipeline answers. On a cluster client every master node has its own
// lane of pipelines, so that a slow or dead node delays no chunk of
// another node.
func (w *Watchdog) renew(ctx context.Context, c redis.UniversalClient, refs []registry.Ref, gen uint64, next time.Time) []error {
	chunk := w.o.chunkSize
	lanes := [][]registry.Ref{refs}
	cluster := false
	switch cc := c.(type) {
	case *redis.ClusterClient:
		cluster = true
		sortBySlot(refs)
		lanes = byNode(ctx, cc, refs)
	case *redis.Ring:
		chunk = 1 // a Ring routes a command by its first key only
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex // guards errs
		errs []error
	)
	for _, lane := range lanes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := w.renewLane(ctx, c, lane, chunk, cluster, gen, next); len(err) > 0 {
				mu.Lock()
				errs = append(errs, err...)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return errs
}

// renewLane renews refs that live on one node: parallelPipes workers each
// take the next few chunks, send them as one pipeline and record the
// answers, until none are left. Small pipelines, several in flight,
// keep the server busy without the waves that a few large pipelines make
// (they are answered together, and the server then waits for the next).
func (w *Watchdog) renewLane(ctx context.Context, c redis.UniversalClient, refs []registry.Ref, chunk int, cluster bool, gen uint64, next time.Time) []error {
	ends := chunkEnds(refs, chunk, cluster)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex // guards errs and taken
		errs  []error
		taken int
	)
	// A part is the next chunks, up to pipelineCalls full chunks' worth of
	// keys (on a cluster, chunks are cut at slot boundaries and often much
	// smaller: a pipeline then carries more of them). They are consecutive
	// in refs, so refs[lo:hi] holds them all without a copy.
	limit := chunk * pipelineCalls
	take := func() (lo, hi int, bounds []int) {
		mu.Lock()
		defer mu.Unlock()
		if taken == len(ends) {
			return 0, 0, nil
		}
		if taken > 0 {
			lo = ends[taken-1]
		}
		n := 1
		for taken+n < len(ends) && ends[taken+n]-lo <= limit {
			n++
		}
		bounds = ends[taken : taken+n]
		taken += n
		return lo, bounds[n-1], bounds
	}
	for range min(parallelPipes, (len(refs)+limit-1)/limit) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for lo, hi, bounds := take(); len(bounds) > 0; lo, hi, bounds = take() {
				part := make([][]registry.Ref, len(bounds))
				start := lo
				for i, end := range bounds {
					part[i] = refs[start:end:end]
					start = end
				}
				if err := w.renewPart(ctx, c, part, refs[lo:hi], chunk, cluster, gen, next); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	return errs
}

// renewPart sends one pipeline of the chunks in part, which together are
// all, and records its answers.
func (w *Watchdog) renewPart(ctx context.Context, c redis.UniversalClient, part [][]registry.Ref, all []registry.Ref, chunk int, cluster bool, gen uint64, next time.Time) error {
	n := len(all)
	live, done := w.reg.HoldSince(c, all, gen)
	if len(live) == 0 {
		done()
		return nil
	}
	if len(live) < n {
		// Some locks were released since planning: cut again.
		part = splitChunks(live, chunk, cluster)
	}
	out := w.attempt(ctx, c, live, part, done)
	w.record(c, out, next)
	return out.err
}

// byNode splits refs, sorted by slot, into one lane per master node. Refs
// whose node is unknown (the cluster state cannot be loaded) share a lane
// of their own, routed by the cluster client.
func byNode(ctx context.Context, c *redis.ClusterClient, refs []registry.Ref) [][]registry.Ref {
	lanes := make(map[string][]registry.Ref)
	var order []string
	node, last := "", -1
	for _, r := range refs {
		if s := int(slotOf(r.Key)); s != last {
			last, node = s, ""
			if m, err := c.MasterForKey(ctx, r.Key); err == nil {
				node = m.Options().Addr
			}
		}
		if _, ok := lanes[node]; !ok {
			order = append(order, node)
		}
		lanes[node] = append(lanes[node], r)
	}
	out := make([][]registry.Ref, len(order))
	for i, n := range order {
		out[i] = lanes[n]
	}
	return out
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
func (w *Watchdog) attempt(ctx context.Context, c redis.UniversalClient, live []registry.Ref, chunks [][]registry.Ref, done func()) outcome {
	defer done()
	timeout := w.timeoutFor(live)
	res := make(chan outcome, 1)
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		res <- w.send(ctx, c, chunks, timeout)
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
func (w *Watchdog) send(ctx context.Context, c redis.UniversalClient, chunks [][]registry.Ref, timeout time.Duration) outcome {
	// The watchdog stops waiting after timeout (see attempt), but the
	// pipeline gets longer: a new connection's handshake takes a few round
	// trips, and a client with ContextTimeoutEnabled would otherwise kill
	// it half-way on a slow network, again on every retry.
	ctx, cancel := context.WithTimeout(registry.WithoutTracking(ctx), pipelineDeadline(timeout))
	defer cancel()
	cmds := make([]*redis.Cmd, len(chunks))
	out := outcome{sent: time.Now()}
	pipe := c.Pipeline()
	for i, ch := range chunks {
		cmds[i] = redis.NewCmd(ctx, renewCommand(ch)...)
		_ = pipe.Process(ctx, cmds[i])
	}
	_, execErr := pipe.Exec(ctx)
	// A server that lost its script cache (restart, failover, SCRIPT FLUSH)
	// answers NOSCRIPT: send those chunks with the source, which reloads it.
	var again redis.Pipeliner
	for i, cmd := range cmds {
		if redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
			if again == nil {
				again = c.Pipeline()
			}
			args := slices.Clone(cmd.Args())
			args[0], args[1] = "eval", scripts.RenewSource()
			cmds[i] = redis.NewCmd(ctx, args...)
			_ = again.Process(ctx, cmds[i])
		}
	}
	if again != nil {
		_, err := again.Exec(ctx)
		execErr = cmp.Or(err, execErr)
	}
	for i, cmd := range cmds {
		ch := chunks[i]
		reply, err := cmd.Result()
		if err == nil && reply == nil && execErr != nil {
			// go-redis leaves the commands untouched when it gets no
			// connection at all (pool timeout, cancelled context).
			err = execErr
		}
		if err == nil && reply == int64(len(ch)) {
			out.renewed = append(out.renewed, ch) // all renewed: the usual case, no copy
			continue
		}
		var res []int64
		if err == nil {
			res, err = scripts.RenewResults(reply, len(ch))
		}
		if err != nil {
			w.failures.Add(1)
			out.failed = append(out.failed, ch...)
			out.err = fmt.Errorf("watchdog: renewing %d locks: %w", len(ch), err)
			continue
		}
		var renewed []registry.Ref
		for j, r := range res {
			switch r {
			case scripts.Renewed:
				renewed = append(renewed, ch[j])
			case scripts.Gone:
				out.gone = append(out.gone, ch[j])
			case scripts.Taken:
				out.taken = append(out.taken, ch[j])
			}
		}
		if len(renewed) > 0 {
			out.renewed = append(out.renewed, renewed)
		}
	}
	return out
}

// renewCommand builds the EVALSHA of the renew script for one chunk: the
// keys, their values, then one TTL for the whole chunk when its locks share
// it (the usual case: chunks are cut from refs grouped by TTL) or one per
// lock.
func renewCommand(refs []registry.Ref) []any {
	n := len(refs)
	shared := true
	for _, r := range refs {
		shared = shared && r.TTL == refs[0].TTL
	}
	size := 3 + 2*n + n
	if shared {
		size = 3 + 2*n + 1
	}
	args := make([]any, 3, size)
	args[0], args[1], args[2] = "evalsha", scripts.RenewSHA1, n
	for _, r := range refs {
		args = append(args, r.Key)
	}
	for _, r := range refs {
		args = append(args, r.Value)
	}
	if shared && n > 0 {
		return append(args, ttlMillis(refs[0].TTL))
	}
	for _, r := range refs {
		args = append(args, ttlMillis(r.TTL))
	}
	return args
}

// record applies one pipeline's outcome to the registry and the fast lane.
func (w *Watchdog) record(c redis.UniversalClient, out outcome, next time.Time) {
	if len(out.renewed) > 0 {
		n := 0
		for _, refs := range out.renewed {
			w.reg.Confirm(c, out.sent, refs)
			n += len(refs)
		}
		w.o.logger.Debug("watchdog: renewed", "locks", n, "rtt", time.Since(out.sent))
		w.renewals.Add(int64(n))
		w.mu.Lock()
		for _, refs := range out.renewed {
			for _, ref := range refs {
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

// pipelineDeadline is the context deadline of a pipeline the watchdog waits
// for at most timeout.
func pipelineDeadline(timeout time.Duration) time.Duration {
	return max(4*timeout, time.Second)
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

func ttlMillis(d time.Duration) int64 { return max(d.Milliseconds(), 1) }

// groupByTTL orders refs so that locks with the same TTL are adjacent, and
// so share chunks (and their single TTL argument). Refs that already share
// one TTL are left as they are.
func groupByTTL(refs []registry.Ref) {
	for _, r := range refs {
		if r.TTL != refs[0].TTL {
			slices.SortStableFunc(refs, func(a, b registry.Ref) int { return cmp.Compare(a.TTL, b.TTL) })
			return
		}
	}
}

// splitChunks cuts refs into chunks of at most size; on a cluster a chunk
// never spans two hash slots (refs must be sorted by slot).
func splitChunks(refs []registry.Ref, size int, cluster bool) [][]registry.Ref {
	ends := chunkEnds(refs, size, cluster)
	out := make([][]registry.Ref, len(ends))
	start := 0
	for i, end := range ends {
		out[i] = refs[start:end:end]
		start = end
	}
	return out
}

// chunkEnds returns where each chunk of splitChunks ends in refs.
func chunkEnds(refs []registry.Ref, size int, cluster bool) []int {
	var ends []int
	for start := 0; start < len(refs); {
		n := min(size, len(refs)-start)
		if cluster {
			s := slotOf(refs[start].Key)
			for i := 1; i < n; i++ {
				if slotOf(refs[start+i].Key) != s {
					n = i
					break
				}
			}
		}
		start += n
		ends = append(ends, start)
	}
	return ends
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
