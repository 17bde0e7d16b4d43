package bsmredislock

import (
	"context"
	"crypto/sha1"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/bsm/redislock"
	"github.com/lockwatch/lockwatch/adapters/internal/adapterkit"
	"github.com/lockwatch/lockwatch/registry"
	"github.com/redis/go-redis/v9"
)

// probeTimeout bounds one probe when the caller's context has a later
// deadline or none.
const probeTimeout = 5 * time.Second

const (
	probeKey      = "lockwatch:probe"
	probeToken    = "lockwatch-probe-token"
	probeMetadata = "lockwatch-probe-metadata"
)

// Probe runs the linked redislock against a recording fake client (no
// server, no network): Obtain with a random token, Obtain again with a custom
// token and metadata, Refresh, TTL and Release. The fake answers every
// EVALSHA with NOSCRIPT, so redislock also sends each script's source with
// EVAL.
//
// Probe returns an *[registry.UpstreamChangedError] naming every script whose
// SHA1 is not pinned, and a plain error when a step sent no command the
// adapter recognises or redislock failed against the fake. It is safe for
// concurrent use.
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
	c := redislock.New(rdb)

	// Each step runs one redislock call and checks what the adapter made of
	// the commands it sent.
	var lock *redislock.Lock
	steps := []struct {
		script script // the script the step must send
		reply  any    // the EVAL reply
		run    func() error
		want   func() registry.Action // what one of the step's commands must classify as
	}{
		{scriptObtain, "OK", func() (err error) {
			lock, err = c.Obtain(ctx, probeKey, 10*time.Second, nil)
			return err
		}, func() registry.Action {
			return registry.Action{Op: registry.OpObtain, Key: probeKey, Value: lock.Token() + lock.Metadata(), TTL: 10 * time.Second}
		}},
		{scriptObtain, "OK", func() (err error) {
			lock, err = c.Obtain(ctx, probeKey, 15*time.Second, &redislock.Options{Token: probeToken, Metadata: probeMetadata})
			return err
		}, func() registry.Action {
			return registry.Action{Op: registry.OpObtain, Key: probeKey, Value: probeToken + probeMetadata, TTL: 15 * time.Second}
		}},
		{scriptRefresh, int64(1), func() error {
			return lock.Refresh(ctx, 20*time.Second, nil)
		}, func() registry.Action {
			return registry.Action{Op: registry.OpRefresh, Key: probeKey, Value: probeToken + probeMetadata, TTL: 20 * time.Second}
		}},
		{scriptPTTL, int64(20000), func() error {
			_, err := lock.TTL(ctx)
			return err
		}, nil},
		{scriptRelease, int64(1), func() error {
			return lock.Release(ctx)
		}, func() registry.Action {
			return registry.Action{Op: registry.OpRelease, Key: probeKey, Value: probeToken + probeMetadata}
		}},
	}
	var problems []string
	for _, st := range steps {
		rec.begin(st.script, st.reply)
		if err := st.run(); err != nil {
			if changed := rec.unpinned(); changed != nil {
				return changed
			}
			return fmt.Errorf("bsmredislock: probe of %s %s: %s: %w", Library, adapterkit.Version(Library), st.script, err)
		}
		if !rec.saw(st.script, st.want) {
			problems = append(problems, st.script.String())
		}
	}
	if changed := rec.unpinned(); changed != nil {
		return changed
	}
	if problems != nil {
		return fmt.Errorf("bsmredislock: probe of %s %s: no recognised command in step(s) %s",
			Library, adapterkit.Version(Library), strings.Join(problems, ", "))
	}
	return nil
}

// errNoNetwork is what the fake client's dialer returns; the recorder never
// lets a command reach it.
var errNoNetwork = errors.New("bsmredislock: probe client has no network")

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
// next hook, answers scripts and records what the library sent.
type recorder struct {
	adapter *Adapter

	mu    sync.Mutex // guards the fields below
	step  script     // the step running: the script it should send
	reply any
	seen  []seen
}

// seen is one recorded script command.
type seen struct {
	step   script
	args   []any // a copy of the command's arguments
	sha1   string
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

func (r *recorder) begin(step script, reply any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.step, r.reply = step, reply
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

// answer sets cmd's reply or error, records it and returns the error.
func (r *recorder) answer(cmd redis.Cmder) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	args := cmd.Args()
	name := ""
	if len(args) > 0 {
		if s, ok := args[0].(string); ok {
			name = strings.ToLower(s)
		}
	}
	var err error
	switch name {
	case "evalsha":
		err = noScript{}
	case "eval":
		if c, ok := cmd.(*redis.Cmd); ok {
			c.SetVal(r.reply)
		}
	default:
		err = errUnsupported{}
	}
	if err != nil {
		cmd.SetErr(err)
	}
	if len(args) > 1 {
		var buf [2 * sha1.Size]byte
		if adapterkit.ScriptSHA1(name, args[1], &buf) {
			var reply any
			if c, ok := cmd.(*redis.Cmd); ok && err == nil {
				reply = c.Val()
			}
			sha := string(buf[:])
			r.seen = append(r.seen, seen{
				step:   r.step,
				args:   append([]any(nil), args...),
				sha1:   sha,
				script: r.adapter.table().Lookup(sha),
				act:    r.adapter.Classify(registry.Command{Name: name, Args: args, Reply: reply, Err: err}),
			})
		}
	}
	return err
}

// saw reports whether step sent its own pinned script and the adapter
// classified it as want() (a pinned script alone is enough when want is nil).
func (r *recorder) saw(step script, want func() registry.Action) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.seen {
		if s.step != step || s.script != step {
			continue
		}
		if want == nil || s.act == want() {
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
		if s.script != scriptUnknown || dup[s.sha1] {
			continue
		}
		dup[s.sha1] = true
		scripts = append(scripts, registry.Script{Use: s.step.String(), SHA1: s.sha1})
	}
	if scripts == nil {
		return nil
	}
	return &registry.UpstreamChangedError{Library: Library, Version: adapterkit.Version(Library), Scripts: scripts}
}
