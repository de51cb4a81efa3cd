package httphandler

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// jsonRule is a checked JSONRule. Without okPath, ok means the code
// field is absent, null or "".
type jsonRule struct {
	okPath, codePath []string
	okName           string // OKField as configured, for messages
	codeName         string // CodeField as configured, for messages
	want             okValue
	scrub            *scrubber // masks the secrets of the values quoted
}

// okValue is OKValue normalised: exactly one of its kinds is set.
type okValue struct {
	str     *string
	boolean *bool
	isInt   bool
	i       int64
	isNum   bool
	f       float64
}

func compileJSON(r *JSONRule) (*jsonRule, error) {
	c := &jsonRule{okName: r.OKField, codeName: r.CodeField}
	var err error
	if r.CodeField != "" {
		if c.codePath, err = splitPath(r.CodeField); err != nil {
			return nil, fmt.Errorf("code field: %w", err)
		}
	}
	if r.OKField == "" {
		if c.codePath == nil {
			return nil, errors.New("ok field: required without a code field")
		}
		return c, nil
	}
	if c.okPath, err = splitPath(r.OKField); err != nil {
		return nil, fmt.Errorf("ok field: %w", err)
	}
	if c.want, err = normalise(r.OKValue); err != nil {
		return nil, fmt.Errorf("ok value: %w", err)
	}
	return c, nil
}

func splitPath(p string) ([]string, error) {
	if p == "" {
		return nil, errors.New("empty path")
	}
	segs := strings.Split(p, ".")
	for _, s := range segs {
		if s == "" {
			return nil, fmt.Errorf("%q: a dotted path without empty parts", p)
		}
	}
	return segs, nil
}

func normalise(v any) (okValue, error) {
	var o okValue
	switch x := v.(type) {
	case string:
		o.str = &x
	case bool:
		o.boolean = &x
	case int:
		o.isInt, o.i = true, int64(x)
	case int8:
		o.isInt, o.i = true, int64(x)
	case int16:
		o.isInt, o.i = true, int64(x)
	case int32:
		o.isInt, o.i = true, int64(x)
	case int64:
		o.isInt, o.i = true, x
	case uint:
		return normaliseUint(uint64(x))
	case uint8:
		return normaliseUint(uint64(x))
	case uint16:
		return normaliseUint(uint64(x))
	case uint32:
		return normaliseUint(uint64(x))
	case uint64:
		return normaliseUint(x)
	case float32:
		return normaliseFloat(float64(x))
	case float64:
		return normaliseFloat(x)
	case json.Number:
		if i, err := strconv.ParseInt(string(x), 10, 64); err == nil {
			o.isInt, o.i = true, i
			return o, nil
		}
		f, err := strconv.ParseFloat(string(x), 64)
		if err != nil {
			return o, fmt.Errorf("%q is not a number", string(x))
		}
		return normaliseFloat(f)
	case nil:
		return o, errors.New("missing: want a string, a bool or a number")
	default:
		return o, fmt.Errorf("want a string, a bool or a number, got %T", v)
	}
	return o, nil
}

func normaliseUint(u uint64) (okValue, error) {
	if u <= math.MaxInt64 {
		return okValue{isInt: true, i: int64(u)}, nil
	}
	return normaliseFloat(float64(u))
}

func normaliseFloat(f float64) (okValue, error) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return okValue{}, fmt.Errorf("%v: want a finite number", f)
	}
	if f == math.Trunc(f) && f >= math.MinInt64 && f < math.MaxInt64 {
		return okValue{isInt: true, i: int64(f)}, nil
	}
	return okValue{isNum: true, f: f}, nil
}

// decodeJSON decodes b as exactly one JSON value, numbers as json.Number.
func decodeJSON(b []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		if err == io.EOF {
			return nil, errors.New("empty body")
		}
		return nil, err
	}
	if _, err := d.Token(); err != io.EOF {
		return nil, errors.New("data after the JSON value")
	}
	return v, nil
}

// lookup follows path through objects (and arrays, by index).
func lookup(v any, path []string) (any, bool) {
	for _, seg := range path {
		switch x := v.(type) {
		case map[string]any:
			var ok bool
			if v, ok = x[seg]; !ok {
				return nil, false
			}
		case []any:
			i, err := strconv.Atoi(seg)
			if err != nil || i < 0 || i >= len(x) {
				return nil, false
			}
			v = x[i]
		default:
			return nil, false
		}
	}
	return v, true
}

// ok reports whether doc holds the ok value (without an ok field: whether
// the code field is absent, null or ""); when not, detail says what it
// holds.
func (r *jsonRule) ok(doc any) (ok bool, detail string) {
	if r.okPath == nil {
		v, found := lookup(doc, r.codePath)
		if s, isStr := v.(string); !found || v == nil || isStr && strings.TrimSpace(s) == "" {
			return true, ""
		}
		return false, fmt.Sprintf("%s is %s, want it absent", r.codeName, r.scrub.describe(v))
	}
	v, found := lookup(doc, r.okPath)
	if found && r.want.equal(v) {
		return true, ""
	}
	got := "missing"
	if found {
		got = "is " + r.scrub.describe(v)
	}
	return false, fmt.Sprintf("%s %s, want %s", r.okName, got, r.want)
}

// code is the code at CodeField: a string as is, a number or bool as written.
func (r *jsonRule) code(doc any) string {
	if r.codePath == nil {
		return ""
	}
	v, _ := lookup(doc, r.codePath)
	switch x := v.(type) {
	case string:
		return x
	case json.Number:
		return x.String()
	case bool:
		return strconv.FormatBool(x)
	}
	return ""
}

func (o okValue) equal(v any) bool {
	switch x := v.(type) {
	case string:
		return o.str != nil && *o.str == x
	case bool:
		return o.boolean != nil && *o.boolean == x
	case json.Number:
		if o.isInt {
			if i, err := strconv.ParseInt(x.String(), 10, 64); err == nil {
				return i == o.i
			}
		}
		if !o.isInt && !o.isNum {
			return false
		}
		f, err := strconv.ParseFloat(x.String(), 64)
		if err != nil {
			return false
		}
		if o.isInt {
			return f == float64(o.i)
		}
		return f == o.f
	}
	return false
}

func (o okValue) String() string {
	switch {
	case o.str != nil:
		return strconv.Quote(*o.str)
	case o.boolean != nil:
		return strconv.FormatBool(*o.boolean)
	case o.isInt:
		return strconv.FormatInt(o.i, 10)
	}
	return strconv.FormatFloat(o.f, 'g', -1, 64)
}

func describe(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case string:
		return strconv.Quote(truncate(x, 64))
	case bool:
		return strconv.FormatBool(x)
	case json.Number:
		return truncate(x.String(), 64)
	case map[string]any:
		return "an object"
	case []any:
		return "an array"
	}
	return "?"
}
