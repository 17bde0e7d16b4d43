package faults_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockwatch/lockwatch/internal/testkit/faultproxy"
	"github.com/lockwatch/lockwatch/internal/testkit/harness"
	"github.com/lockwatch/lockwatch/watchdog"
)

// The figures of TestLateAnswerCause.
const (
	lateTTL = time.Second
	// lateLocks is how many locks each library holds per kind of
	// interference (deleted, overwritten).
	lateLocks = 4
	// lateHealthy is how long the locks are renewed before they are
	// interfered with.
	lateHealthy = 1500 * time.Millisecond
)

// lateCase is one variant of TestLateAnswerCause.
type lateCase struct {
	name string
	rtt  time.Duration // the round trip the proxy adds
	// steady: the latency is there from the start of the healthy phase,
	// and the locks are interfered with one by one, 1/32 of the TTL apart;
	// otherwise the network slows down at the interference, done to every
	// lock at once a little after Redis confirmed a renewal of them all.
	steady bool
	// beyondI2: the round trip is longer than a sixth of the TTL, beyond
	// what I2 promises to keep (the README's "answers renewals within a
	// sixth of the TTL"): a lock may be lost to the latency alone before
	// it is interfered with. Such a lock must then have been told before
	// its key could be taken (ErrUnconfirmed) and reported with what
	// Redis said or could not say (ErrUnreachable or ErrLockGone, never
	// ErrLockTaken); it is logged, not failed.
	beyondI2 bool
}

// Owner-checked interference from a client no registry watches: only a key
// that still holds the lock's value is deleted or overwritten, so that a
// lock already lost does not count. Both return 1 when they acted, -1 when
// the key did not hold the value.
var (
	delIfHeld = redis.NewScript(`if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return -1`)
	setIfHeld = redis.NewScript(`if redis.call('get', KEYS[1]) == ARGV[1] then redis.call('set', KEYS[1], ARGV[2], 'px', ARGV[3]) return 1 end return -1`)
)

// TestLateAnswerCause (issue 26, item 6; invariant I12): a renewal whose
// answer arrives after the watchdog stopped waiting for it (its wait is a
// quarter of the TTL, and shrinks to what the lock has left, at least
// 10 ms) still tells what Redis said. When a lock's key was deleted, or
// set to another value, behind its holder's back, OnLost and the lock's
// wd.Context must say ErrLockGone or ErrLockTaken, never ErrUnreachable:
// the server answered every call.
//
// A real redis-server; the holder's client (go-redis defaults) reaches it
// through a fault proxy that delays every chunk by the same latency each
// way, so every renewal's answer comes a round trip after it was sent
// (below the TTL: each answer comes while the lock could still be held).
// Locks of 1 s (redislock and redsync, 4 each deleted and 4 each
// overwritten) are obtained and renewed once (which loads the renew
// script) before any latency; then they are interfered with by
// owner-checked scripts on an unwatched client: only a key still holding
// the lock's value is deleted or overwritten.
//
// Variants:
//
//   - steady, round trip 0.4 TTL (beyond I2, see lateCase.beyondI2): the
//     latency is there for 1.5 s of
//     renewal before the interference, done one lock at a time 1/32 of the
//     TTL apart (so that it meets the renewal cycle at different points).
//     Each answer is slower than the wait (a quarter of the TTL) and than
//     the retry delay after it (a tenth), so late answers meet retries in
//     flight; every lock stays held in Redis by the late renewals.
//   - slowed, round trip 0.5 TTL: renewal is prompt until, a little after
//     Redis confirmed a renewal of every lock, the network slows down and
//     every lock is interfered with at once. The next renewal's answer,
//     "not held", reaches the client about 0.8 TTL after the last
//     confirmed renewal was sent: before E - d (E = that send time + TTL,
//     d = TTL/100 + 2 ms), while a retry of it is in flight.
//   - slowed, round trip 0.8 TTL: the same, but that answer reaches the
//     client after E: the job may be told early, but OnLost must still
//     say what Redis answered.
//   - control, steady, round trip 0.1 TTL (answers within the wait): the
//     assertions hold when answers are not late.
//
// Verdict, per lock: not reported before the interference (which found
// the key holding its value: a lock given up then was given up while Redis
// held it); reported exactly once by OnLost, with ErrLockGone (deleted) or
// ErrLockTaken (overwritten), not ErrUnreachable; its job context
// cancelled with a cause matching ErrLost, not ErrUnreachable, and the
// same reason as OnLost's when the client had received Redis's "not held"
// answer before the context was cancelled. The log gives, per lock, when
// the first renewal answer that could only say "not held" (a renew call
// sent after the interference) reached the client, E, and when the lock
// was reported, all relative to the interference, and the round trips of
// the renew calls.
func TestLateAnswerCause(t *testing.T) {
	skipShort(t)
	for _, c := range []lateCase{
		{name: "control/steady/rtt=0.1ttl", rtt: lateTTL / 10, steady: true},
		{name: "steady/rtt=0.4ttl", rtt: 4 * lateTTL / 10, steady: true, beyondI2: true},
		{name: "slowed/rtt=0.5ttl", rtt: lateTTL / 2},
		{name: "slowed/rtt=0.8ttl", rtt: 8 * lateTTL / 10},
	} {
		t.Run(c.name, func(t *testing.T) { runLateAnswer(t, c) })
	}
}

// lateLock is one lock of TestLateAnswerCause and what was done to it.
type lateLock struct {
	h    *harness.Held
	job  *jobWatch
	op   string    // "del" or "set"
	want error     // ErrLockGone or ErrLockTaken
	done time.Time // when the interference's reply came back
}

func runLateAnswer(t *testing.T, c lateCase) {
	e := newEnv(t, envConfig{proxy: true})
	reg := harness.Watch(t, e.app)
	replies := recordRenewReplies(e.app)
	e.App = harness.Attach(t, reg, harness.Config{
		Options: []watchdog.Option{watchdog.WithStopTimeout(200 * time.Millisecond)},
		Lag:     e.lag,
		LogTail: 30,
	})

	var ls []*lateLock
	for _, op := range []string{"del", "set"} {
		for _, lib := range harness.Libs {
			for i := range lateLocks {
				key := fmt.Sprintf("late:%s:%s:%d", op, lib, i)
				l := &lateLock{h: harness.MustObtain(t, lib, e.app, key, lateTTL), op: op, want: watchdog.ErrLockGone}
				if op == "set" {
					l.want = watchdog.ErrLockTaken
				}
				l.job = watchJob(e.WD, key)
				replies.follow(key, l.job.ctx)
				ls = append(ls, l)
			}
		}
	}
	t.Cleanup(func() {
		for _, l := range ls {
			l.job.cancel()
		}
	})
	// The first renewal loads the renew script (NOSCRIPT, then EVAL: two
	// round trips); it is sent before the network slows down.
	warm := time.Now()
	for _, l := range ls {
		for {
			if tl, ok := e.Tracked(l.h.Key); ok && tl.Renewals > 0 {
				break
			}
			if time.Since(warm) > 2*lateTTL+e.lag.Since(warm) {
				t.Fatalf("%v: not renewed within %v of the obtains, want renewed before the latency is added%s", l.h, 2*lateTTL, e.lag.Note(2*lateTTL))
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	slow := func() {
		e.proxy.SetLatency(faultproxy.Upstream, c.rtt/2)
		e.proxy.SetLatency(faultproxy.Downstream, c.rtt/2)
	}
	t.Cleanup(func() {
		e.proxy.SetLatency(faultproxy.Upstream, 0)
		e.proxy.SetLatency(faultproxy.Downstream, 0)
	})
	order := make([]*lateLock, 0, len(ls)) // deletes and overwrites interleaved
	for i := range len(ls) / 2 {
		order = append(order, ls[i], ls[len(ls)/2+i])
	}
	var spacing time.Duration
	if c.steady {
		slow()
		time.Sleep(lateHealthy)
		spacing = lateTTL / 32
	} else {
		time.Sleep(lateHealthy)
		// Wait for a renewal of every lock confirmed since now, then
		// slow down and interfere 20 ms later.
		mark := time.Now()
		for !e.confirmedSince(helds(order), mark) {
			if time.Since(mark) > lateTTL+e.lag.Since(mark) {
				t.Fatalf("no renewal of every lock confirmed within %v after the healthy phase, want one every third of the TTL%s", lateTTL, e.lag.Note(lateTTL))
			}
			time.Sleep(2 * time.Millisecond)
		}
		time.Sleep(20 * time.Millisecond)
		slow()
	}

	// Interfere.
	var lostToLatency []*lateLock
	ctx := context.Background()
	begun := time.Now()
	for _, l := range order {
		var res int64
		var err error
		if l.op == "del" {
			res, err = delIfHeld.Run(ctx, e.spy, []string{l.h.Key}, l.h.Value).Int64()
		} else {
			res, err = setIfHeld.Run(ctx, e.spy, []string{l.h.Key}, l.h.Value, "intruder", 60000).Int64()
		}
		l.done = time.Now()
		switch {
		case err != nil:
			t.Fatalf("%s %v through the spy: %v", l.op, l.h, err)
		case res != 1 && c.beyondI2:
			lostToLatency = append(lostToLatency, l)
			l.done = time.Time{}
		case res != 1:
			t.Errorf("%v: not held with its value when interfered with (%+.3fs after the first), want held: lost under latency alone? OnLost: %s; job context: %s",
				l.h, l.done.Sub(begun).Seconds(), harness.DescribeLost(e.Lost.ForKey(l.h.Key), begun, 3), describeJob(l.job, begun))
			l.done = time.Time{}
		}
		time.Sleep(spacing)
	}

	// Every lock interfered with is reported.
	within := 3*lateTTL + time.Second
	for _, l := range ls {
		if l.done.IsZero() {
			continue
		}
		left := within - time.Since(l.done) + e.lag.Since(begun)
		if evs := e.Lost.WaitKey(l.h.Key, max(left, 0)); len(evs) == 0 {
			t.Errorf("%v: not reported within %v of the %s, want reported with %v%s", l.h, within, l.op, l.want, e.lag.Note(within))
		}
	}
	time.Sleep(200 * time.Millisecond) // a second report would come now
	lag := e.lag.Between(begun, time.Now())
	unreachable := 0
	for _, l := range lostToLatency {
		evs := e.Lost.ForKey(l.h.Key)
		_, cause := l.job.result()
		line := fmt.Sprintf("%v: lost to the latency alone before it was interfered with; OnLost: %s; job context: %s",
			l.h, harness.DescribeLost(evs, begun, 3), describeJob(l.job, begun))
		t.Log(line)
		switch {
		case len(evs) != 1:
			t.Errorf("%s: want one OnLost report", line)
		case errors.Is(evs[0].Err, watchdog.ErrLockTaken) || !errors.Is(evs[0].Err, watchdog.ErrUnreachable) && !errors.Is(evs[0].Err, watchdog.ErrLockGone):
			t.Errorf("%s: want ErrUnreachable or ErrLockGone", line)
		case !errors.Is(cause, watchdog.ErrUnconfirmed):
			t.Errorf("%s: want the job told early (ErrUnconfirmed), before its key could be taken", line)
		}
		if len(evs) == 1 && errors.Is(evs[0].Err, watchdog.ErrUnreachable) {
			unreachable++
		}
	}

	var bad []string
	unconfirmed := 0
	var lines []string
	for _, l := range ls {
		if l.done.IsZero() {
			continue
		}
		evs := e.Lost.ForKey(l.h.Key)
		at, cause := l.job.result()
		answer, toldBefore := replies.firstAfter(l.h.Key, l.done)
		var confirmed time.Time
		if len(evs) > 0 {
			confirmed = evs[0].Lock.ConfirmedAt
		}
		bigE := confirmed.Add(lateTTL)
		line := fmt.Sprintf("%s (%s): OnLost %s; job context cancelled %s with %s; first renewal answer after the %s reached the client %s (job context done by then: %v); E %s (relative to the %s)",
			l.h, l.op, describeLostAt(evs, l.done), relTo(at, l.done), describeCause(cause), l.op, relTo(answer, l.done), toldBefore, relTo(bigE, l.done), l.op)
		lines = append(lines, line)
		var why []string
		// The watchdog waits for a late answer a quarter of the TTL past
		// E before it gives a lock up (less 20 ms of slack).
		noAnswer := len(evs) == 1 && errors.Is(evs[0].Err, watchdog.ErrUnreachable) && !evs[0].At.Before(bigE.Add(lateTTL/4-20*time.Millisecond)) &&
			(answer.IsZero() || answer.After(evs[0].At))
		switch {
		case noAnswer:
			// No answer reached the client before the lock was given up,
			// past its TTL since its last confirmation (and the wait for
			// a late answer): the endpoint did not answer in time, and
			// ErrUnreachable says so (item 6). A loaded machine slows the
			// round trip beyond the proxy's latency.
			unreachable++
			t.Logf("%s: given up, no answer in time", line)
		case len(evs) > 0 && evs[0].At.Before(l.done):
			why = append(why, fmt.Sprintf("reported lost (%s) %.3fs before the %s, which found the key still holding the lock's value: given up while Redis held it (its late renewals kept it)",
				describeCause(evs[0].Err), l.done.Sub(evs[0].At).Seconds(), l.op))
		case len(evs) != 1:
			why = append(why, fmt.Sprintf("reported %d times, want once", len(evs)))
		case errors.Is(evs[0].Err, watchdog.ErrUnreachable) || !errors.Is(evs[0].Err, l.want):
			why = append(why, fmt.Sprintf("OnLost reason %v, want %v", evs[0].Err, l.want))
		}
		switch {
		case at.IsZero():
			why = append(why, "job context not cancelled")
		case !errors.Is(cause, watchdog.ErrLost) || errors.Is(cause, watchdog.ErrUnreachable):
			why = append(why, fmt.Sprintf("job context cause %v, want %v (matching ErrLost, not ErrUnreachable)", cause, l.want))
		case !errors.Is(cause, l.want) && !errors.Is(cause, watchdog.ErrUnconfirmed):
			why = append(why, fmt.Sprintf("job context cause %v, want %v (or ErrUnconfirmed, told early)", cause, l.want))
		case !errors.Is(cause, l.want) && !answer.IsZero() && !toldBefore:
			// Only a context cancelled before Redis's answer reached the
			// client may be told early (ErrUnconfirmed).
			why = append(why, fmt.Sprintf("job context cancelled with %v after Redis's answer had reached the client, want %v", cause, l.want))
		}
		if errors.Is(cause, watchdog.ErrUnconfirmed) {
			unconfirmed++
		}
		if len(why) > 0 {
			bad = append(bad, line+": "+strings.Join(why, "; "))
		}
	}
	st := e.WD.Stats()
	t.Logf("round trip %v added (the watchdog waits %v for an answer, less when the lock has less left); %d locks; Losses %+v, Renewals %d, Failures %d, RenewErrors %d; renew calls through the proxy: %s; this process's lag since the first interference %v (worst %v)",
		c.rtt, max(lateTTL/4, 50*time.Millisecond), len(ls), st.Losses, st.Renewals, st.Failures, st.RenewErrors, replies.summary(), lag, e.lag.Worst())
	// Each job context cancelled with ErrUnconfirmed was told once at
	// least. A lock is told once per confirmation: beyond I2 (steady), a
	// late answer may confirm a lock told already, which is then told
	// again when its next renewal is not confirmed in time either (CI run
	// 122, on a loaded machine: all 16 told twice). So Unconfirmed counts
	// what the watchdog's log says it told, and no fewer than the job
	// contexts cancelled so; without late confirmations, exactly those.
	told := toldInLog(e.Logs.String())
	wantTold := unconfirmed + len(lostToLatency)
	if st.Losses.Unreachable != int64(unreachable) || st.Unconfirmed != int64(told) || told < wantTold || !c.beyondI2 && told != wantTold {
		t.Errorf("Stats(): Losses.Unreachable %d, Unconfirmed %d; want %d (locks lost to latency alone) and %d, the locks the log says were told, at least %d (the job contexts cancelled with ErrUnconfirmed)%s",
			st.Losses.Unreachable, st.Unconfirmed, unreachable, told, wantTold, map[bool]string{true: ", more only beyond I2", false: ", exactly"}[c.beyondI2])
	}
	t.Logf("per lock:\n  %s", strings.Join(lines, "\n  "))
	if len(bad) > 0 {
		t.Errorf("%d of %d locks interfered with were not reported with what Redis answered (issue 26 item 6, I12):\n  %s", len(bad), len(lines), strings.Join(bad, "\n  "))
	}
}

// toldInLog adds up the locks the watchdog's log lines say their holders
// were told may be lost.
func toldInLog(log string) int {
	n := 0
	for line := range strings.Lines(log) {
		if !strings.Contains(line, `msg="watchdog: no renewal confirmed in time; the locks may be lost`) {
			continue
		}
		_, rest, ok := strings.Cut(line, " locks=")
		if !ok {
			continue
		}
		if k, err := strconv.Atoi(strings.Fields(rest)[0]); err == nil {
			n += k
		}
	}
	return n
}

func helds(ls []*lateLock) []*harness.Held {
	hs := make([]*harness.Held, len(ls))
	for i, l := range ls {
		hs[i] = l.h
	}
	return hs
}

func describeJob(j *jobWatch, since time.Time) string {
	at, cause := j.result()
	if at.IsZero() {
		return "not cancelled"
	}
	return fmt.Sprintf("cancelled %s with %s", relTo(at, since), describeCause(cause))
}

func describeCause(err error) string {
	if err == nil {
		return "no cause"
	}
	return harness.FirstMatch(err, err.Error(), harness.WatchdogSentinels[1:]...)
}

func describeLostAt(evs []harness.LostEvent, since time.Time) string {
	if len(evs) == 0 {
		return "none"
	}
	var parts []string
	for _, ev := range evs {
		parts = append(parts, fmt.Sprintf("%s %s", relTo(ev.At, since), describeCause(ev.Err)))
	}
	return strings.Join(parts, ", ")
}

// ---------------------------------------------------------------------------
// Renew replies, as the holder's client received them.

// renewReply is one renew script call through the holder's client.
type renewReply struct {
	sent, replied time.Time
	keys          []string
	told          []bool // per key: its job context was done when the reply came
	err           error
}

// renewReplies is a go-redis hook that records, for every renew script call
// through a client, when it was sent, the keys it named, and when its reply
// (or error) came back, before the watchdog applies it.
type renewReplies struct {
	mu    sync.Mutex
	calls []renewReply
	jobs  map[string]context.Context // the job context of each key followed
}

// follow makes the record of each reply to a renewal of key say whether
// job was done when the reply came back.
func (r *renewReplies) follow(key string, job context.Context) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.jobs == nil {
		r.jobs = make(map[string]context.Context)
	}
	r.jobs[key] = job
}

var _ redis.Hook = (*renewReplies)(nil)

// recordRenewReplies adds a renewReplies hook to c; call it before c is used.
func recordRenewReplies(c *redis.Client) *renewReplies {
	r := &renewReplies{}
	c.AddHook(r)
	return r
}

func (r *renewReplies) DialHook(next redis.DialHook) redis.DialHook { return next }

func (r *renewReplies) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !harness.IsRenew(cmd) {
			return next(ctx, cmd)
		}
		i := r.start(renewKeys(cmd))
		err := next(ctx, cmd)
		r.end(i, err)
		return err
	}
}

func (r *renewReplies) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		var renews []redis.Cmder
		var calls []int
		for _, c := range cmds {
			if harness.IsRenew(c) {
				renews = append(renews, c)
				calls = append(calls, r.start(renewKeys(c)))
			}
		}
		err := next(ctx, cmds)
		for i, c := range renews {
			r.end(calls[i], c.Err())
		}
		return err
	}
}

// start records a call sent now and returns its index.
func (r *renewReplies) start(keys []string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, renewReply{sent: time.Now(), keys: keys})
	return len(r.calls) - 1
}

// end records that call i's reply (or error) came back now, and which of
// its keys' job contexts were done by then.
func (r *renewReplies) end(i int, err error) {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	c := &r.calls[i]
	c.replied, c.err = now, err
	c.told = make([]bool, len(c.keys))
	for j, k := range c.keys {
		if job := r.jobs[k]; job != nil {
			c.told[j] = job.Err() != nil
		}
	}
}

// summary counts the calls, those answered and failed, and their round
// trips.
func (r *renewReplies) summary() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var rtts []time.Duration
	failed, open := 0, 0
	for _, c := range r.calls {
		switch {
		case c.replied.IsZero():
			open++
		case c.err != nil:
			failed++
		default:
			rtts = append(rtts, c.replied.Sub(c.sent))
		}
	}
	return fmt.Sprintf("%d sent, %d answered (round trip %s), %d failed, %d not answered yet", len(r.calls), len(rtts), spread(rtts), failed, open)
}

// firstAfter returns when the first answer came back to a renew call
// that names key and was sent at or after since (zero when none did): the
// earliest answer, after an interference done by since, that can only say
// the lock is not held; and whether key's job context was done by then
// (read as the answer came, before the watchdog saw it). Calls that failed
// (no answer) do not count.
func (r *renewReplies) firstAfter(key string, since time.Time) (time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var at time.Time
	told := false
	for _, c := range r.calls {
		if c.replied.IsZero() || c.err != nil || c.sent.Before(since) || (!at.IsZero() && !c.replied.Before(at)) {
			continue
		}
		if j := slices.Index(c.keys, key); j >= 0 {
			at, told = c.replied, c.told[j]
		}
	}
	return at, told
}

// renewKeys returns the keys a renew script call names: EVALSHA sha numkeys
// key... (or EVAL source numkeys key...).
func renewKeys(cmd redis.Cmder) []string {
	a := cmd.Args()
	if len(a) < 3 {
		return nil
	}
	n, err := strconv.Atoi(fmt.Sprint(a[2]))
	if err != nil || n < 0 || len(a) < 3+n {
		return nil
	}
	keys := make([]string, n)
	for i := range n {
		keys[i] = fmt.Sprint(a[3+i])
	}
	return keys
}
