package adapterkit

import (
	"math"
	"strconv"
	"testing"
	"time"
)

func TestText(t *testing.T) {
	tests := []struct {
		arg  any
		want string
		ok   bool
	}{
		{"job:1", "job:1", true},
		{"", "", true},
		{[]byte("job:1"), "job:1", true},
		{[]byte(nil), "", true},
		{42, "", false},
		{nil, "", false},
		{time.Second, "", false},
	}
	for _, tt := range tests {
		if got, ok := Text(tt.arg); got != tt.want || ok != tt.ok {
			t.Errorf("Text(%#v) = %q, %v, want %q, %v", tt.arg, got, ok, tt.want, tt.ok)
		}
	}
}

func TestInteger(t *testing.T) {
	tests := []struct {
		arg  any
		want int64
		ok   bool
	}{
		{int(-7), -7, true},
		{int8(-8), -8, true},
		{int16(16), 16, true},
		{int32(32), 32, true},
		{int64(math.MinInt64), math.MinInt64, true},
		{uint(7), 7, true},
		{uint8(255), 255, true},
		{uint16(16), 16, true},
		{uint32(math.MaxUint32), math.MaxUint32, true},
		{uint64(math.MaxInt64), math.MaxInt64, true},
		{uint64(math.MaxInt64 + 1), 0, false},
		{uint(math.MaxUint64), 0, false},
		{"10000", 10000, true},
		{[]byte("-20"), -20, true},
		{"0", 0, true},
		{"9223372036854775807", math.MaxInt64, true},
		{"-9223372036854775808", math.MinInt64, true},
		{"9223372036854775808", 0, false},
		{"-9223372036854775809", 0, false},
		{"99999999999999999999", 0, false},
		{"-0", 0, false},
		{"010", 0, false},
		{"+10", 0, false},
		{" 10", 0, false},
		{"10s", 0, false},
		{"-", 0, false},
		{"", 0, false},
		{10000.0, 0, false},
		{10 * time.Second, 0, false},
		{nil, 0, false},
		{true, 0, false},
	}
	for _, tt := range tests {
		if got, ok := Integer(tt.arg); got != tt.want || ok != tt.ok {
			t.Errorf("Integer(%#v) = %d, %v, want %d, %v", tt.arg, got, ok, tt.want, tt.ok)
		}
	}
}

func TestMillis(t *testing.T) {
	maxMS := int64(math.MaxInt64 / int64(time.Millisecond))
	minMS := int64(math.MinInt64 / int64(time.Millisecond))
	tests := []struct {
		ms   int64
		want time.Duration
		ok   bool
	}{
		{0, 0, true},
		{2500, 2500 * time.Millisecond, true},
		{-10, -10 * time.Millisecond, true},
		{maxMS, time.Duration(maxMS) * time.Millisecond, true},
		{maxMS + 1, 0, false},
		{minMS, time.Duration(minMS) * time.Millisecond, true},
		{minMS - 1, 0, false},
		{math.MaxInt64, 0, false},
	}
	for _, tt := range tests {
		if got, ok := Millis(tt.ms); got != tt.want || ok != tt.ok {
			t.Errorf("Millis(%d) = %v, %v, want %v, %v", tt.ms, got, ok, tt.want, tt.ok)
		}
	}
}

func TestArgsAllocs(t *testing.T) {
	var args = []any{"job:1", "20000", int64(3)}
	n := testing.AllocsPerRun(100, func() {
		_, _ = Text(args[0])
		_, _ = Integer(args[1])
		_, _ = Integer(args[2])
		_, _ = Millis(20000)
	})
	if n != 0 {
		t.Errorf("Text, Integer and Millis of string and integer arguments allocate %v times, want 0", n)
	}
}

// FuzzInteger checks that a string is an integer exactly when it is the
// canonical decimal form of an int64, as Redis's string2ll accepts it.
func FuzzInteger(f *testing.F) {
	for _, s := range []string{"0", "-0", "10000", "-1", "010", "+1", "9223372036854775807", "-9223372036854775808", "9223372036854775808", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, ok := Integer(s)
		n, err := strconv.ParseInt(s, 10, 64)
		want := err == nil && strconv.FormatInt(n, 10) == s
		if ok != want || (ok && got != n) {
			t.Fatalf("Integer(%q) = %d, %v, want %d, %v", s, got, ok, n, want)
		}
		if bgot, bok := Integer([]byte(s)); bgot != got || bok != ok {
			t.Fatalf("Integer([]byte(%q)) = %d, %v, want %d, %v as for the string", s, bgot, bok, got, ok)
		}
	})
}
