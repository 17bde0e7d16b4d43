package adaptertest

import (
	"crypto/sha1"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/lockwatch/lockwatch/adapters/internal/adapterkit"
	"github.com/lockwatch/lockwatch/registry"
	"github.com/redis/go-redis/v9"
)

// The fuzz input encodes a command's arguments after the name as a sequence
// of tagged values, so that the fuzzer mixes argument types:
//
//	tagString n bytes...   a string of n bytes
//	tagBytes n bytes...    a []byte of n bytes
//	tagInt 8 bytes         an int
//	tagNil                 nil
//	tagFloat 8 bytes       a float64
//	tagSHA i               the i-th pinned SHA1, as a string
//	tagSource i            the EVAL source of the i-th pinned script, as a string
//	tagUint 8 bytes        a uint64
//	tagInt64 8 bytes       an int64 (go-redis's own integer arguments)
//	tagBool b              a bool, true when b is odd
//	tagDuration 8 bytes    a time.Duration
//
// Tags and indexes wrap around, so every input decodes. Adding a tag changes
// what the committed corpus files under testdata/fuzz decode to (they stay
// valid inputs); regenerate them as the adapters' fuzz tests say.
const (
	tagString byte = iota
	tagBytes
	tagInt
	tagNil
	tagFloat
	tagSHA
	tagSource
	tagUint
	tagInt64
	tagBool
	tagDuration
	numTags
)

// The replies and errors a fuzz input selects from by index. New entries go
// at the end: committed corpus files select by index.
var (
	fuzzReplies = []any{nil, "OK", int64(1), int64(0), int64(-1), true, false, "1", []any{int64(1)},
		int64(9500), int64(-3), "", []byte("OK"), float64(1)}
	fuzzErrors = []error{nil, redis.Nil, adapterkit.ErrNoScript, errors.New("i/o timeout"),
		RedisError("WRONGTYPE Operation against a key holding the wrong kind of value")}
)

// FuzzNames are the command names a fuzz input selects from with
// [Codec.CommandCase]: the three lock-shaped names first, then commands that
// are no lock command of either library (some of them close to one), then
// the empty name. New entries go at the end: committed corpus files select
// by index.
var FuzzNames = []string{"evalsha", "eval", "set", "get", "del", "pexpire", "pttl", "setnx",
	"script", "evalsha_ro", "eval_ro", "fcall", "setex", "getset", "evalsh", "evals", "se", ""}

// Codec encodes and decodes the fuzz input of an adapter's FuzzClassify.
type Codec struct {
	shas    []string // pinned SHA1s, in pins order
	sources []string // their EVAL sources; "" when unknown
}

// NewCodec returns the codec of the given pins, whose EVAL sources are in
// sources. A pin may have no source there (a script of an upstream release
// that is not linked): its tagSource decodes to "".
func NewCodec[S comparable](pins []adapterkit.Pin[S], sources map[S]string) Codec {
	var c Codec
	for _, p := range pins {
		c.shas = append(c.shas, p.SHA1)
		c.sources = append(c.sources, sources[p.Script])
	}
	return c
}

// Decode returns the arguments data encodes; it stops at a truncated value.
func (c Codec) Decode(data []byte) []any {
	var args []any
	for len(data) > 0 {
		tag := data[0] % numTags
		data = data[1:]
		switch tag {
		case tagString, tagBytes:
			if len(data) == 0 {
				return args
			}
			n := min(int(data[0]), len(data)-1)
			b := data[1 : 1+n]
			data = data[1+n:]
			if tag == tagString {
				args = append(args, string(b))
			} else {
				args = append(args, append([]byte(nil), b...))
			}
		case tagInt, tagFloat, tagUint, tagInt64, tagDuration:
			if len(data) < 8 {
				return args
			}
			u := binary.BigEndian.Uint64(data)
			data = data[8:]
			switch tag {
			case tagInt:
				args = append(args, int(int64(u)))
			case tagFloat:
				args = append(args, math.Float64frombits(u))
			case tagInt64:
				args = append(args, int64(u))
			case tagDuration:
				args = append(args, time.Duration(u))
			default:
				args = append(args, u)
			}
		case tagNil:
			args = append(args, nil)
		case tagBool:
			if len(data) == 0 {
				return args
			}
			args = append(args, data[0]%2 == 1)
			data = data[1:]
		case tagSHA, tagSource:
			if len(data) == 0 {
				return args
			}
			i := int(data[0]) % len(c.shas)
			data = data[1:]
			if tag == tagSHA {
				args = append(args, c.shas[i])
			} else {
				args = append(args, c.sources[i])
			}
		}
	}
	return args
}

// Encode returns the input that decodes to args: strings (pinned SHA1s and
// sources by index), []byte, int, int64, uint64, float64, bool,
// time.Duration and nil. Strings and []byte longer than 255 bytes are cut
// to 255; any other type panics.
func (c Codec) Encode(args ...any) []byte {
	var out []byte
	index := func(list []string, s string) int {
		for i, x := range list {
			if x == s && x != "" { // "" is no source: a string
				return i
			}
		}
		return -1
	}
	for _, a := range args {
		switch v := a.(type) {
		case string:
			if i := index(c.shas, v); i >= 0 {
				out = append(out, tagSHA, byte(i))
			} else if i := index(c.sources, v); i >= 0 {
				out = append(out, tagSource, byte(i))
			} else {
				v = v[:min(len(v), 255)]
				out = append(out, tagString, byte(len(v)))
				out = append(out, v...)
			}
		case []byte:
			v = v[:min(len(v), 255)]
			out = append(out, tagBytes, byte(len(v)))
			out = append(out, v...)
		case int:
			out = binary.BigEndian.AppendUint64(append(out, tagInt), uint64(v))
		case int64:
			out = binary.BigEndian.AppendUint64(append(out, tagInt64), uint64(v))
		case time.Duration:
			out = binary.BigEndian.AppendUint64(append(out, tagDuration), uint64(v))
		case bool:
			b := byte(0)
			if v {
				b = 1
			}
			out = append(out, tagBool, b)
		case float64:
			out = binary.BigEndian.AppendUint64(append(out, tagFloat), math.Float64bits(v))
		case uint64:
			out = binary.BigEndian.AppendUint64(append(out, tagUint), v)
		case nil:
			out = append(out, tagNil)
		default:
			panic("fuzz encode: unsupported type")
		}
	}
	return out
}

// Command returns the command a fuzz input selects: the name names[nameSel]
// as it is (also as the first argument), the arguments data decodes to, and
// one of a few replies and errors.
func (c Codec) Command(names []string, nameSel, replySel, errSel uint8, data []byte) registry.Command {
	name := names[int(nameSel)%len(names)]
	return registry.Command{
		Name:  name,
		Args:  append([]any{name}, c.Decode(data)...),
		Reply: fuzzReplies[int(replySel)%len(fuzzReplies)],
		Err:   fuzzErrors[int(errSel)%len(fuzzErrors)],
	}
}

// PinnedScript tells, independently of the adapter and of adapterkit, which
// of pins the arguments of an EVALSHA or EVAL named name name.
func PinnedScript[S comparable](pins []adapterkit.Pin[S], name string, args []any) S {
	var unknown S
	if len(args) < 2 {
		return unknown
	}
	var s string
	switch v := args[1].(type) {
	case string:
		s = v
	case []byte:
		s = string(v)
	default:
		return unknown
	}
	switch name {
	case "evalsha":
		s = strings.ToLower(s)
	case "eval":
		sum := sha1.Sum([]byte(s))
		s = hex.EncodeToString(sum[:])
	default:
		return unknown
	}
	for _, p := range pins {
		if p.SHA1 == s {
			return p.Script
		}
	}
	return unknown
}

// Text returns a string or []byte argument as a string, and "" for any
// other.
func Text(a any) string {
	s, _ := adapterkit.Text(a)
	return s
}

// CaseRaw is the bit of [Codec.CommandCase]'s caseSel that hands the name
// to the adapter as spelt in the arguments instead of in lower case (the
// registry hook always hands over lower case; this bit checks that other
// spellings do no harm).
const CaseRaw = 0x80

// ErrPending is the bit of [Codec.CommandCase]'s errSel that makes the
// command pending ([registry.Command] Pending, asked before it is sent):
// without reply and error, whatever replySel and the other bits of errSel
// select. Recorded commands never set it.
const ErrPending = 0x80

// CommandCase returns the command a fuzz input selects: the name
// names[nameSel] spelt with the letters whose bit is set in caseSel (bits 0
// to 6, one per letter) in upper case as the first argument, the arguments
// data decodes to, and one of a few replies and errors, or none with the
// [ErrPending] bit of errSel set. Command.Name is the name in lower case, as
// the registry hook hands it over, or with the [CaseRaw] bit the spelling of
// the first argument.
func (c Codec) CommandCase(names []string, nameSel, caseSel, replySel, errSel uint8, data []byte) registry.Command {
	cmd := c.Command(names, nameSel, replySel, errSel, data)
	if errSel&ErrPending != 0 {
		cmd.Reply, cmd.Err, cmd.Pending = nil, nil, true
	}
	b := []byte(strings.ToLower(cmd.Name))
	for i := 0; i < len(b) && i < 7; i++ {
		if caseSel&(1<<i) != 0 && 'a' <= b[i] && b[i] <= 'z' {
			b[i] -= 'a' - 'A'
		}
	}
	cmd.Args[0] = string(b)
	cmd.Name = strings.ToLower(cmd.Name)
	if caseSel&CaseRaw != 0 {
		cmd.Name = string(b)
	}
	return cmd
}

// maxPrefix is the longest prefix of a fuzz command's arguments that
// [Prefixes] returns besides the whole: longer than any lock command.
const maxPrefix = 10

// Prefixes returns the lengths of the argument prefixes of a fuzz command
// of n arguments to classify: n, and 0 to min(n-1, 10).
func Prefixes(n int) []int {
	out := []int{n}
	for i := 0; i < n && i <= maxPrefix; i++ {
		out = append(out, i)
	}
	return out
}

// CheckClassify calls classify on c and fails t unless the invariants every
// adapter keeps hold: Classify only reads (arguments and reply unchanged), it
// answers the same twice, an OpNone action carries nothing, a command that is
// no SET, EVAL or EVALSHA (in any case) is OpNone, an obtain or refresh comes
// with a positive TTL and without an error, a not-held without an error
// other than a nil reply (redis.Nil), a release or not-held with no TTL, a
// pending command is never not-held, and Keys is nil or holds at
// least two keys, the first of them Key, in a slice of its own on each call.
// It returns what classify made of c.
func CheckClassify(t testing.TB, classify func(registry.Command) registry.Action, c registry.Command) registry.Action {
	t.Helper()
	before := snapshot(c)
	got := classify(c)
	if after := snapshot(c); after != before {
		t.Fatalf("Classify(%v) changed its command: before %s, after %s", c.Args, before, after)
	}
	again := classify(c)
	if !adapterkit.SameAction(again, got) {
		t.Fatalf("Classify(%v) = %+v, then %+v: want the same answer", c.Args, got, again)
	}
	if len(got.Keys) > 0 && &got.Keys[0] == &again.Keys[0] {
		t.Fatalf("Classify(%v) = %+v twice with the same Keys slice, want a fresh one each time", c.Args, got)
	}
	name := strings.ToLower(c.Name)
	switch {
	case got.Keys != nil && (len(got.Keys) < 2 || got.Keys[0] != got.Key):
		t.Fatalf("Classify(%v) = %+v, want Keys nil, or at least two keys starting with Key", c.Args, got)
	case got.Op == registry.OpNone:
		if !adapterkit.SameAction(got, registry.Action{}) {
			t.Fatalf("Classify(%v) = %+v, want nothing but OpNone", c.Args, got)
		}
	case c.Pending && got.Op == registry.OpNotHeld:
		t.Fatalf("Classify(pending %v) = %+v, want no not-held before the reply", c.Args, got)
	case got.Op > registry.OpAttempt:
		t.Fatalf("Classify(%v) = %+v, an unknown Op", c.Args, got)
	case name != "set" && name != "eval" && name != "evalsha":
		t.Fatalf("Classify(%s %v) = %+v, want OpNone for a command that is no lock command", c.Name, c.Args, got)
	case len(c.Args) < 3:
		t.Fatalf("Classify(%v) = %+v, want OpNone for %d arguments", c.Args, got, len(c.Args))
	case (got.Op == registry.OpObtain || got.Op == registry.OpRefresh) && (got.TTL <= 0 || c.Err != nil):
		t.Fatalf("Classify(%v, err %v) = %+v, want an obtain or refresh only with a positive TTL and no error", c.Args, c.Err, got)
	case got.Op == registry.OpNotHeld && c.Err != nil && !errors.Is(c.Err, redis.Nil):
		t.Fatalf("Classify(%v, err %v) = %+v, want no not-held from a failed command (a nil reply aside)", c.Args, c.Err, got)
	case (got.Op == registry.OpRelease || got.Op == registry.OpNotHeld) && got.TTL != 0:
		t.Fatalf("Classify(%v) = %+v, want no TTL on a release or not-held", c.Args, got)
	case got.Op == registry.OpAttempt && (c.Pending || name != "set"):
		t.Fatalf("Classify(%v, pending %v) = %+v, want an attempt only for a SET that was answered", c.Args, c.Pending, got)
	}
	return got
}

// snapshot describes a command's arguments and reply, types and bytes
// included.
func snapshot(c registry.Command) string {
	var b strings.Builder
	for _, a := range c.Args {
		fmt.Fprintf(&b, "%T(%#v) ", a, a)
	}
	fmt.Fprintf(&b, "reply %T(%#v) pending %v", c.Reply, c.Reply, c.Pending)
	return b.String()
}
