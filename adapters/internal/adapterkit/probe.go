package adapterkit

import (
	"context"
	"crypto/sha1"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/lockwatch/lockwatch/registry"
	"github.com/redis/go-redis/v9"
)

// ProbeTimeout bounds one probe when the caller's context has a later
// deadline or none.
const ProbeTimeout = 5 * time.Second

// ErrNoScript is Redis's NOSCRIPT error reply, as go-redis's HasErrorPrefix
// recognises one. A fake that answers it to every EVALSHA makes go-redis's
// Script.Run, and the libraries that copy it, send the source with EVAL too.
var ErrNoScript error = noScript{}

// ErrUnsupported is the error reply a fake answers any command with that the
// probe does not expect.
var ErrUnsupported error = errUnsupported{}

type noScript struct{}

func (noScript) Error() string { return "NOSCRIPT No matching script. Please use EVAL." }
func (noScript) RedisError()   {}

type errUnsupported struct{}

func (errUnsupported) Error() string { return "ERR lockwatch probe does not support this command" }
func (errUnsupported) RedisError()   {}

// Recorder is a probe's fake Redis: a go-redis client whose dialer always
// fails and whose hook never calls the next hook, so that no command reaches
// a server. The hook answers each command with Answer and, for SET, EVAL and
// EVALSHA, records its arguments, the pinned script it runs and what
// Classify makes of it.
//
// Set the fields before [Recorder.Probe] and do not change them after. A
// Recorder runs one probe; [Recorder.Seen] then tells what it recorded.
type Recorder[S comparable] struct {
	// Package is the adapter's package name, which starts the probe's
	// errors.
	Package string
	// Library is the upstream module path, as probe errors name it.
	Library string
	// Pins are the adapter's pinned scripts.
	Pins Pins[S]
	// Classify is the adapter's. The recorder calls it on the goroutine that
	// sent the command, without holding a lock.
	Classify func(registry.Command) registry.Action
	// Answer sets cmd's value as the fake Redis answers the upstream library
	// and returns the reply the adapter classifies, or the error the recorder
	// sets on cmd. name is the command's name in lower case and reply the
	// running step's Reply.
	Answer func(name string, cmd redis.Cmder, reply any) (any, error)

	mu    sync.Mutex // guards the fields below
	step  string     // the step running
	reply any        // its Reply
	seen  []Seen[S]
}

// Step is one step of a probe: one call of the upstream library, and what
// the adapter must make of the commands it sends.
type Step[S comparable] struct {
	// Name names the step in errors and is the use reported for the unpinned
	// scripts it sends.
	Name string
	// Script is the pinned script the step must send; the zero S for a step
	// that must send a command that is no script (a SET).
	Script S
	Reply  any // handed to Answer while the step runs
	Run    func() error
	// Want returns what one of the step's commands must classify as; nil
	// when sending Script is enough.
	Want func() registry.Action
	// WantPending returns what that command must classify as when the hook
	// asks before sending it ([registry.Command] Pending); nil when that is
	// not checked.
	WantPending func() registry.Action
}

// Seen is one recorded SET, EVAL or EVALSHA.
type Seen[S comparable] struct {
	Step   string          // the step that sent it
	Args   []any           // a copy of the command's arguments
	SHA1   string          // of the script it runs; "" for SET
	Script S               // the pinned script with that SHA1, the zero S if none
	Act    registry.Action // what Classify made of it
	// Pending is what Classify made of it before it was answered, asked
	// with [registry.Command] Pending.
	Pending registry.Action
	// Deadline is the deadline of the context a SET was sent with; zero
	// without one, and for other commands.
	Deadline time.Time
}

// Probe runs the steps that script returns, in order, against the fake
// client script is given, under ctx bounded by [ProbeTimeout]. It returns
// ctx's error when ctx is already done, an *[registry.UpstreamChangedError]
// naming every script the library sent whose SHA1 is not pinned, and a plain
// error when a step sent no command the adapter classified as the step wants
// or the library failed against the fake.
func (r *Recorder[S]) Probe(ctx context.Context, script func(ctx context.Context, rdb *redis.Client) []Step[S]) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, ProbeTimeout)
	defer cancel()

	rdb := r.client()
	defer rdb.Close()

	var problems []string
	for _, st := range script(ctx, rdb) {
		r.begin(st.Name, st.Reply)
		if err := st.Run(); err != nil {
			if changed := r.unpinned(); changed != nil {
				return changed
			}
			return fmt.Errorf("%s: probe of %s %s: %s: %w", r.Package, r.Library, Version(r.Library), st.Name, err)
		}
		if !r.saw(st) {
			problems = append(problems, st.Name)
		}
	}
	if changed := r.unpinned(); changed != nil {
		return changed
	}
	if problems != nil {
		return fmt.Errorf("%s: probe of %s %s: no recognised command in step(s) %s",
			r.Package, r.Library, Version(r.Library), strings.Join(problems, ", "))
	}
	return nil
}

// Seen returns what the recorder recorded, in the order it was sent.
func (r *Recorder[S]) Seen() []Seen[S] {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Seen[S](nil), r.seen...)
}

// client returns the fake client: no network, r's hook answers everything.
func (r *Recorder[S]) client() *redis.Client {
	h := hook[S]{r: r, noNetwork: errors.New(r.Package + ": probe client has no network")}
	rdb := redis.NewClient(&redis.Options{
		// An IP literal: go-redis releases from v9.1x resolve the host name
		// of Addr when the client is made, and the probe must not touch the
		// network, DNS included. The Dialer below never dials it.
		Addr:       "127.0.0.1:6379",
		MaxRetries: -1,
		Dialer: func(context.Context, string, string) (net.Conn, error) {
			return nil, h.noNetwork
		},
	})
	rdb.AddHook(h)
	return rdb
}

func (r *Recorder[S]) begin(step string, reply any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.step, r.reply = step, reply
}

// answer sets cmd's reply or error, records it and returns the error. It
// runs on the goroutine that sent cmd, and calls Classify (before answering,
// as pending, then with the answer) without holding r.mu, so that a stack
// walk in Classify sees the library's frames.
func (r *Recorder[S]) answer(ctx context.Context, cmd redis.Cmder) error {
	args := cmd.Args()
	name := ""
	if len(args) > 0 {
		if s, ok := args[0].(string); ok {
			name = strings.ToLower(s)
		}
	}
	lockShaped := name == "set" || name == "eval" || name == "evalsha"
	var deadline time.Time
	if name == "set" && ctx != nil {
		deadline, _ = ctx.Deadline() // as the registry's hook tells it
	}
	var pending registry.Action
	if lockShaped {
		pending = r.Classify(registry.Command{Name: name, Args: args, Pending: true, Deadline: deadline})
	}
	r.mu.Lock()
	stepReply := r.reply
	r.mu.Unlock()
	reply, err := r.Answer(name, cmd, stepReply)
	if err != nil {
		cmd.SetErr(err)
	}
	if !lockShaped {
		return err
	}
	s := Seen[S]{
		Args:     append([]any(nil), args...),
		Act:      r.Classify(registry.Command{Name: name, Args: args, Reply: reply, Err: err, Deadline: deadline}),
		Pending:  pending,
		Deadline: deadline,
	}
	var buf [2 * sha1.Size]byte
	if len(args) > 1 && ScriptSHA1(name, args[1], &buf) {
		s.SHA1 = string(buf[:])
		s.Script = r.Pins.Lookup(s.SHA1)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	s.Step = r.step
	r.seen = append(r.seen, s)
	return err
}

// saw reports whether st sent a command the adapter classified as st.Want(),
// and asked before sending it as st.WantPending(): its own pinned script, or
// for a step without one a command that is no script (any such command when
// Want and WantPending are nil).
func (r *Recorder[S]) saw(st Step[S]) bool {
	var none S
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.seen {
		if s.Step != st.Name || s.Script != st.Script || (st.Script == none && s.SHA1 != "") {
			continue
		}
		if (st.Want == nil || SameAction(s.Act, st.Want())) &&
			(st.WantPending == nil || SameAction(s.Pending, st.WantPending())) {
			return true
		}
	}
	return false
}

// unpinned returns the error naming the scripts the adapter does not know,
// each once, in the order they were first sent; nil when there are none.
func (r *Recorder[S]) unpinned() error {
	var none S
	r.mu.Lock()
	defer r.mu.Unlock()
	var scripts []registry.Script
	dup := make(map[string]bool)
	for _, s := range r.seen {
		if s.SHA1 == "" || s.Script != none || dup[s.SHA1] {
			continue
		}
		dup[s.SHA1] = true
		scripts = append(scripts, registry.Script{Use: s.Step, SHA1: s.SHA1})
	}
	if scripts == nil {
		return nil
	}
	return &registry.UpstreamChangedError{Library: r.Library, Version: Version(r.Library), Scripts: scripts}
}

// hook is the fake client's go-redis hook: it never calls the next hook.
type hook[S comparable] struct {
	r         *Recorder[S]
	noNetwork error // what dialing returns
}

var _ redis.Hook = hook[struct{}]{}

func (h hook[S]) DialHook(redis.DialHook) redis.DialHook {
	return func(context.Context, string, string) (net.Conn, error) { return nil, h.noNetwork }
}

func (h hook[S]) ProcessHook(redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { return h.r.answer(ctx, cmd) }
}

func (h hook[S]) ProcessPipelineHook(redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		var first error
		for _, cmd := range cmds {
			if err := h.r.answer(ctx, cmd); err != nil && first == nil {
				first = err
			}
		}
		return first
	}
}
