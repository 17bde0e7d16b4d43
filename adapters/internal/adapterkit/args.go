package adapterkit

import (
	"math"
	"time"
)

// The helpers below read command arguments the way go-redis writes them to
// the wire and Redis parses them. They accept only the types an honest
// caller passes and report anything else as not ok; they never panic. None
// of them allocates for a string argument, so Classify can call them on the
// hook path.

// Text returns a string or []byte argument as a string.
func Text(a any) (string, bool) {
	switch v := a.(type) {
	case string:
		return v, true
	case []byte:
		return string(v), true
	}
	return "", false
}

// Integer returns an integer argument, or a string or []byte argument that
// Redis would parse as a 64-bit integer.
func Integer(a any) (int64, bool) {
	switch v := a.(type) {
	case int:
		return int64(v), true
	case int8:
		return int64(v), true
	case int16:
		return int64(v), true
	case int32:
		return int64(v), true
	case int64:
		return v, true
	case uint:
		return unsigned(uint64(v))
	case uint8:
		return int64(v), true
	case uint16:
		return int64(v), true
	case uint32:
		return int64(v), true
	case uint64:
		return unsigned(v)
	case string:
		return parseInt(v)
	case []byte:
		return parseInt(string(v))
	}
	return 0, false
}

func unsigned(v uint64) (int64, bool) {
	if v > math.MaxInt64 {
		return 0, false
	}
	return int64(v), true
}

// parseInt parses s as Redis does (string2ll): an optional minus sign, then
// decimal digits without leading zeros, nothing else.
func parseInt(s string) (int64, bool) {
	if s == "0" {
		return 0, true
	}
	neg := false
	if len(s) > 0 && s[0] == '-' {
		neg, s = true, s[1:]
	}
	if len(s) == 0 || len(s) > 19 || s[0] < '1' || s[0] > '9' {
		return 0, false
	}
	var n uint64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + uint64(c-'0') // 19 digits cannot overflow uint64
	}
	if neg {
		if n > math.MaxInt64+1 {
			return 0, false
		}
		return -int64(n), true
	}
	if n > math.MaxInt64 {
		return 0, false
	}
	return int64(n), true
}

// Millis returns a millisecond count as a duration, and false when it does
// not fit in a time.Duration.
func Millis(ms int64) (time.Duration, bool) {
	if ms > math.MaxInt64/int64(time.Millisecond) || ms < math.MinInt64/int64(time.Millisecond) {
		return 0, false
	}
	return time.Duration(ms) * time.Millisecond, true
}
