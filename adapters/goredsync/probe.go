package goredsync

import (
	"context"
	"crypto/sha1"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/lockwatch/lockwatch/adapters/internal/adapterkit"
	"github.com/lockwatch/lockwatch/registry"
	"github.com/redis/go-redis/v9"
)

// probeTimeout bounds one probe when the caller's context has a later
// deadline or none.
const probeTimeout = 5 * time.Second

const probeKey = "lockwatch:probe"

// The steps of the probe, named as the unpinned scripts they send are
// reported.
const (
	stepObtain        = "obtain"
	stepRefresh       = "refresh"
	stepRefreshSetNX  = "refresh (WithSetNXOnExtend)"
	stepRelease       = "release"
	probeSetNXExpiry  = 2500 * time.Millisecond // sent as PX
	probeDefaultReply = int64(1)                // what every script answers
)

// Probe runs the linked redsync against a recording fake go-redis client (no
// server, no network) through redsync's go-redis v9 pool: Lock, Extend and
// Unlock of a mutex with the default options, then of one with
// WithSetNXOnExtend and a sub-second-precision expiry. The fake answers every
// EVALSHA with NOSCRIPT, so redsync also sends each script's source with
// EVAL, and every SET NX with success.
//
// Probe returns an *[registry.UpstreamChangedError] naming every script whose
// SHA1 is not pinned, and a plain error when a step sent no command the
// adapter recognises (for Lock, a SET NX that the stack walk attributes to
// redsync) or redsync failed against the fake. It is safe for concurrent use.
func (a *Adapter) Probe(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return a.probe(ctx, &recorder{adapter: a})
}

// probe runs the probe's steps against rec.
func (a *Adapter) probe(ctx context.Context, rec *recorder) error {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()

	rdb := rec.client()
	defer rdb.Close()
	rs := redsync.New(goredis.NewPool(rdb))

	type step struct {
		name   string
		script script // the pinned script the step must send; none for Lock's SET
		run    func() error
		want   func() registry.Action
	}
	// mutexSteps returns the steps that lock, extend and unlock m.
	mutexSteps := func(m *redsync.Mutex, ttl time.Duration, refresh string, touch script) []step {
		held := func(op registry.Op, ttl time.Duration) func() registry.Action {
			return func() registry.Action {
				return registry.Action{Op: op, Key: probeKey, Value: m.Value(), TTL: ttl}
			}
		}
		return []step{
			{stepObtain, scriptUnknown, func() error { return m.LockContext(ctx) }, held(registry.OpObtain, ttl)},
			{refresh, touch, func() error { return succeeded(m.ExtendContext(ctx)) }, held(registry.OpRefresh, ttl)},
			{stepRelease, scriptDelete, func() error { return succeeded(m.UnlockContext(ctx)) }, held(registry.OpRelease, 0)},
		}
	}
	steps := append(
		mutexSteps(rs.NewMutex(probeKey, redsync.WithTries(1)), 8*time.Second, stepRefresh, scriptTouch),
		mutexSteps(rs.NewMutex(probeKey, redsync.WithTries(1), redsync.WithExpiry(probeSetNXExpiry), redsync.WithSetNXOnExtend()),
			probeSetNXExpiry, stepRefreshSetNX, scriptTouchWithSetNX)...)

	var problems []string
	for _, st := range steps {
		rec.begin(st.name)
		if err := st.run(); err != nil {
			if changed := rec.unpinned(); changed != nil {
				return changed
			}
			return fmt.Errorf("goredsync: probe of %s %s: %s: %w", Library, adapterkit.Version(Library), st.name, err)
		}
		if !rec.saw(st.name, st.script, st.want()) {
			problems = append(problems, st.name)
		}
	}
	if changed := rec.unpinned(); changed != nil {
		return changed
	}
	if problems != nil {
		return fmt.Errorf("goredsync: probe of %s %s: no recognised command in step(s) %s",
			Library, adapterkit.Version(Library), strings.Join(problems, ", "))
	}
	return nil
}

// succeeded turns redsync's (ok, err) results into an error.
func succeeded(ok bool, err error) error {
	if err == nil && !ok {
		err = errors.New("redsync reported failure without an error")
	}
	return err
}

// errNoNetwork is what the fake client's dialer returns; the recorder never
// lets a command reach it.
var errNoNetwork = errors.New("goredsync: probe client has no network")

// noScript is a Redis error reply, as go-redis's HasErrorPrefix recognises
// one.
type noScript struct{}

func (noScript) Error() string { return "NOSCRIPT No matching script. Please use EVAL." }
func (noScript) RedisError()   {}

// errUnsupported answers any command the probe does not expect.
type errUnsupported struct{}

func (errUnsupported) Error() string { return "ERR lockwatch probe does not support this command" }
func (errUnsupported) RedisError()   {}

// recorder is the probe's fake Redis: a go-redis hook that never calls the
// next hook, answers SET and scripts, and records what the library sent.
type recorder struct {
	adapter *Adapter

	mu   sync.Mutex // guards the fields below
	step string     // the step running
	seen []seen
}

// seen is one recorded SET, EVAL or EVALSHA.
type seen struct {
	step   string
	args   []any  // a copy of the command's arguments
	sha1   string // "" for SET
	script script
	act    registry.Action
}

var _ redis.Hook = (*recorder)(nil)

func (r *recorder) client() *redis.Client {
	rdb := redis.NewClient(&redis.Options{
		Addr:       "lockwatch.invalid:6379",
		MaxRetries: -1,
		Dialer: func(context.Context, string, string) (net.Conn, error) {
			return nil, errNoNetwork
		},
	})
	rdb.AddHook(r)
	return rdb
}

func (r *recorder) begin(step string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.step = step
}

func (r *recorder) DialHook(redis.DialHook) redis.DialHook {
	return func(context.Context, string, string) (net.Conn, error) { return nil, errNoNetwork }
}

func (r *recorder) ProcessHook(redis.ProcessHook) redis.ProcessHook {
	return func(_ context.Context, cmd redis.Cmder) error { return r.answer(cmd) }
}

func (r *recorder) ProcessPipelineHook(redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(_ context.Context, cmds []redis.Cmder) error {
		var first error
		for _, cmd := range cmds {
			if err := r.answer(cmd); err != nil && first == nil {
				first = err
			}
		}
		return first
	}
}

// answer sets cmd's reply or error, records it and returns the error. It
// runs on the goroutine that sent cmd, so the adapter's stack walk sees the
// library's frames.
func (r *recorder) answer(cmd redis.Cmder) error {
	args := cmd.Args()
	name := ""
	if len(args) > 0 {
		if s, ok := args[0].(string); ok {
			name = strings.ToLower(s)
		}
	}
	var (
		err   error
		reply any
	)
	switch c := cmd.(type) {
	case *redis.BoolCmd:
		if name == "set" {
			c.SetVal(true)
			reply = true
		} else {
			err = errUnsupported{}
		}
	case *redis.StatusCmd:
		if name == "set" {
			c.SetVal("OK")
			reply = "OK"
		} else {
			err = errUnsupported{}
		}
	case *redis.StringCmd: // SCRIPT LOAD: answer the source's SHA1
		var buf [2 * sha1.Size]byte
		if name == "script" && len(args) == 3 && adapterkit.ScriptSHA1("eval", args[2], &buf) {
			c.SetVal(string(buf[:]))
		} else {
			err = errUnsupported{}
		}
	case *redis.Cmd:
		switch name {
		case "evalsha":
			err = noScript{}
		case "eval":
			reply = probeDefaultReply
		case "set":
			reply = "OK"
		default:
			err = errUnsupported{}
		}
		if err == nil {
			c.SetVal(reply)
		}
	default:
		err = errUnsupported{}
	}
	if err != nil {
		cmd.SetErr(err)
	}
	if name != "set" && name != "eval" && name != "evalsha" {
		return err
	}
	rc := registry.Command{Name: name, Args: args, Reply: reply, Err: err}
	act := r.adapter.Classify(rc) // before taking the lock: it walks this goroutine's stack
	s := seen{args: append([]any(nil), args...), act: act}
	var buf [2 * sha1.Size]byte
	if len(args) > 1 && adapterkit.ScriptSHA1(name, args[1], &buf) {
		s.sha1 = string(buf[:])
		s.script = r.adapter.table().Lookup(s.sha1)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	s.step = r.step
	r.seen = append(r.seen, s)
	return err
}

// saw reports whether step sent a command the adapter classified as want:
// its own pinned script, or for a step without one a command that is no
// script.
func (r *recorder) saw(step string, sc script, want registry.Action) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.seen {
		if s.step != step || s.script != sc || (sc == scriptUnknown && s.sha1 != "") {
			continue
		}
		if s.act == want {
			return true
		}
	}
	return false
}

// unpinned returns the error naming the scripts the adapter does not know,
// each once, in the order they were first sent; nil when there are none.
func (r *recorder) unpinned() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	var scripts []registry.Script
	dup := make(map[string]bool)
	for _, s := range r.seen {
		if s.sha1 == "" || s.script != scriptUnknown || dup[s.sha1] {
			continue
		}
		dup[s.sha1] = true
		scripts = append(scripts, registry.Script{Use: s.step, SHA1: s.sha1})
	}
	if scripts == nil {
		return nil
	}
	return &registry.UpstreamChangedError{Library: Library, Version: adapterkit.Version(Library), Scripts: scripts}
}
