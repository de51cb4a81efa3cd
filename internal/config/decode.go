package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"

	"github.com/redrive/redrive/internal/redact"
	"github.com/redrive/redrive/processor"
)

// decoder walks a YAML node tree into a Config. It is strict where
// yaml.v3's own decoder is lenient (unknown and duplicate keys), it expands
// ${NAME} in scalars before typing them, and it keeps going after a problem
// so that all of them are reported at once, each with its path and line.
type decoder struct {
	getenv func(string) string
	errs   []error
	lines  map[string]int        // path → line of its key or list item
	vars   map[string][]string   // path → the ${NAME}s expanded in its value
	text   map[*yaml.Node]string // scalars already expanded
	bad    map[*yaml.Node]bool   // scalars whose expansion failed (reported once)
	steps  int                   // nodes visited, aliases counted each time
	stop   bool                  // the step budget ran out
}

// maxSteps bounds the work aliases can make: "pipelines: [*p, *p, ...]"
// with lists of aliases inside can multiply a small file into a huge tree.
const maxSteps = 1 << 20

// maxMergeDepth bounds << merges of merges (and catches a merge cycle).
const maxMergeDepth = 8

var (
	durationType = reflect.TypeFor[Duration]()
	tierType     = reflect.TypeFor[Tier]()
)

// decodeFile fills c from data. It reports decoding problems only; it does
// not apply overrides or defaults and does not validate.
func decodeFile(data []byte, getenv func(string) string, c *Config) error {
	c.src = &sources{lines: map[string]int{}, from: map[string]string{}, vars: map[string][]string{}}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil // an empty file: all defaults (and Validate says what is missing)
		}
		return syntaxError(data, err)
	}
	for {
		var more yaml.Node
		err := dec.Decode(&more)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return syntaxError(data, err)
		}
		if len(more.Content) > 0 && !(more.Content[0].Kind == yaml.ScalarNode && more.Content[0].ShortTag() == "!!null") {
			return &Error{Line: more.Line, Msg: "a second YAML document (after ---); the configuration is one document", Err: ErrSyntax}
		}
	}
	d := &decoder{
		getenv: getenv,
		lines:  c.src.lines,
		vars:   c.src.vars,
		text:   map[*yaml.Node]string{},
		bad:    map[*yaml.Node]bool{},
	}
	root := &doc
	if root.Kind == yaml.DocumentNode {
		if len(root.Content) == 0 {
			return nil
		}
		root = root.Content[0]
	}
	d.value(root, "", reflect.ValueOf(c).Elem(), "")
	return errors.Join(d.errs...) // capped by Parse
}

// syntaxError is yaml.v3's error as an *Error. yaml.v3 gives no line for
// a character it refuses (a NUL, another control character, a byte that is
// not UTF-8); then the first such character's line and column are found.
func syntaxError(data []byte, err error) error {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	if !strings.HasPrefix(msg, "line ") {
		if line, col, what, ok := badChar(data); ok {
			return &Error{Line: line, Column: col, Msg: what + ": the file must be UTF-8 text without control characters (tabs and line breaks are fine)", Err: ErrSyntax}
		}
	}
	return &Error{Msg: redact.Text(msg), Err: ErrSyntax}
}

// badChar finds the first character YAML does not allow in data (as
// yaml.v3 reads UTF-8: printable characters, tab and line breaks), with
// its line and column (1-based, in characters) and what it is. A UTF-16
// file (byte order mark) is not searched.
func badChar(data []byte) (line, col int, what string, ok bool) {
	if bytes.HasPrefix(data, []byte{0xff, 0xfe}) || bytes.HasPrefix(data, []byte{0xfe, 0xff}) {
		return 0, 0, "", false
	}
	i := 0
	if bytes.HasPrefix(data, []byte("\xef\xbb\xbf")) {
		i = 3
	}
	line, col = 1, 1
	for i < len(data) {
		r, size := utf8.DecodeRune(data[i:])
		switch {
		case r == utf8.RuneError && size <= 1:
			return line, col, fmt.Sprintf("byte 0x%02x is not UTF-8", data[i]), true
		case r == 0:
			return line, col, "a NUL byte", true
		case !printable(r):
			return line, col, fmt.Sprintf("control character %U", r), true
		case r == '\n', r == '\r' && (i+1 >= len(data) || data[i+1] != '\n'):
			line, col = line+1, 1
		case r == '\r':
			// the \r of \r\n: the \n counts the line
		default:
			col++
		}
		i += size
	}
	return 0, 0, "", false
}

// printable is YAML's printable set, tab and line breaks included.
func printable(r rune) bool {
	switch {
	case r == '\t', r == '\n', r == '\r', r == 0x85:
		return true
	case 0x20 <= r && r <= 0x7e, 0xa0 <= r && r <= 0xd7ff, 0x10000 <= r && r <= 0x10ffff:
		return true
	case 0xe000 <= r && r <= 0xfffd:
		return r != 0xfeff
	}
	return false
}

func (d *decoder) fail(n *yaml.Node, path string, kind error, format string, args ...any) {
	line := 0
	if n != nil {
		line = n.Line
	}
	d.errs = append(d.errs, &Error{Line: line, Path: path, Msg: redact.Text(fmt.Sprintf(format, args...)), Err: kind})
}

// step counts a node against maxSteps; false means stop.
func (d *decoder) step(n *yaml.Node, path string) bool {
	if d.stop {
		return false
	}
	d.steps++
	if d.steps > maxSteps {
		d.stop = true
		d.fail(n, path, ErrSyntax, "the document is too large once its aliases are expanded (more than %d nodes)", maxSteps)
		return false
	}
	return true
}

// deref follows an alias to its anchored node.
func deref(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && i < 16; i++ {
		n = n.Alias
	}
	if n == nil || n.Kind == yaml.AliasNode {
		return nil
	}
	return n
}

// value decodes n into v. opts are the field's `config:"..."` options.
func (d *decoder) value(n *yaml.Node, path string, v reflect.Value, opts string) {
	if n = deref(n); n == nil {
		d.fail(nil, path, ErrSyntax, "an alias that leads nowhere")
		return
	}
	if !d.step(n, path) {
		return
	}
	if n.Kind == yaml.ScalarNode {
		if _, null, ok := d.scalar(n, path); !ok || null {
			return // null (or absent after expansion): keep the zero value, so the default applies
		}
	}
	t := v.Type()
	if t == durationType {
		s, ok := d.want(n, path, "a duration such as 30s")
		if !ok {
			return
		}
		dur, err := ParseDuration(s)
		if err != nil {
			d.fail(n, path, ErrType, "%v", err)
			return
		}
		v.SetInt(int64(dur))
		return
	}
	if t == tierType {
		s, ok := d.want(n, path, "a delay such as 30s")
		if !ok {
			return
		}
		tier, err := ParseTier(s)
		if err != nil {
			d.fail(n, path, ErrType, "%v", err)
			return
		}
		v.Set(reflect.ValueOf(tier))
		return
	}
	switch t.Kind() {
	case reflect.Interface:
		d.anyValue(n, path, v)
	case reflect.Pointer:
		p := reflect.New(t.Elem())
		d.value(n, path, p.Elem(), opts)
		v.Set(p)
	case reflect.Struct:
		d.structValue(n, path, v)
	case reflect.Slice:
		d.sliceValue(n, path, v, opts)
	case reflect.Map:
		d.mapValue(n, path, v)
	case reflect.String:
		if s, ok := d.want(n, path, "a string"); ok {
			v.SetString(s)
		}
	case reflect.Bool:
		s, ok := d.want(n, path, "true or false")
		if !ok {
			return
		}
		switch strings.ToLower(strings.TrimSpace(s)) {
		case "true", "yes", "on":
			v.SetBool(true)
		case "false", "no", "off":
			v.SetBool(false)
		default:
			d.fail(n, path, ErrType, "want true or false, got %q", s)
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		s, ok := d.want(n, path, "a whole number")
		if !ok {
			return
		}
		var i int64
		var err error
		if opts == "bytes" {
			i, err = parseBytes(s)
		} else {
			i, err = parseInt(s, t.Bits())
		}
		if err != nil {
			d.fail(n, path, ErrType, "%v", err)
			return
		}
		v.SetInt(i)
	case reflect.Float32, reflect.Float64:
		if opts == "rate" {
			s, ok := d.want(n, path, "a rate such as 50/s")
			if !ok {
				return
			}
			r, err := processor.ParseRate(s)
			if err != nil {
				d.fail(n, path, ErrType, "%v", err)
				return
			}
			v.SetFloat(r)
			return
		}
		s, ok := d.want(n, path, "a number")
		if !ok {
			return
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(s), t.Bits())
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			d.fail(n, path, ErrType, "want a number, got %q", s)
			return
		}
		v.SetFloat(f)
	default:
		d.fail(n, path, ErrType, "no decoder for %s", t) // a new field of a type this file does not know
	}
}

// scalar is n's value with ${NAME} expanded, and whether it is null.
// ok is false when the expansion failed (and was reported).
func (d *decoder) scalar(n *yaml.Node, path string) (s string, null, ok bool) {
	if d.bad[n] {
		return "", false, false
	}
	s, done := d.text[n]
	if !done {
		var err error
		if s, err = expand(n.Value, d.getenv); err != nil {
			d.bad[n] = true
			var bn badNameError
			if errors.As(err, &bn) && secretPath(path) {
				err = errors.New("bad variable name in ${...} (not shown: a secret): want letters, digits and _, not starting with a digit")
			}
			d.fail(n, path, ErrExpand, "%v", err)
			return "", false, false
		}
		d.text[n] = s
	}
	if _, seen := d.vars[path]; !seen && strings.Contains(n.Value, "${") {
		if names := refs(n.Value); len(names) > 0 {
			d.vars[path] = names
		}
	}
	return s, isNull(n, s), true
}

// isNull: empty once expanded, an explicit !!null, or a plain ~ or null.
// So "ttl: ${TTL}" and "ttl: \"${TTL}\"" with TTL unset are an absent ttl.
func isNull(n *yaml.Node, s string) bool {
	if s == "" {
		return true
	}
	if n.Style&yaml.TaggedStyle != 0 {
		return n.Tag == "!!null"
	}
	if n.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle|yaml.LiteralStyle|yaml.FoldedStyle) != 0 {
		return false
	}
	switch s {
	case "~", "null", "Null", "NULL":
		return true
	}
	return false
}

// want is n's expanded text, or a type error when n is not a scalar.
func (d *decoder) want(n *yaml.Node, path, what string) (string, bool) {
	if n.Kind != yaml.ScalarNode {
		d.fail(n, path, ErrType, "want %s, got %s", what, kindName(n, path))
		return "", false
	}
	s, _, ok := d.scalar(n, path)
	return s, ok
}

// kindName names what n is for a message: its text when it is a scalar,
// unless path is a secret's.
func kindName(n *yaml.Node, path string) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if secretPath(path) {
			return "a string (not shown: a secret)"
		}
		return strconv.Quote(n.Value)
	}
	return "something else"
}

// pair is one key: value of a mapping; merged ones come from <<.
type pair struct {
	key, val *yaml.Node
	merged   bool
}

// pairs lists a mapping's own pairs, then those it merges with <<, in
// precedence order: own keys win over merged ones, earlier merges over
// later ones.
func (d *decoder) pairs(n *yaml.Node, path string, depth int) []pair {
	var own, merged []pair
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		if !d.step(k, path) {
			return nil
		}
		if k.Kind == yaml.ScalarNode && k.ShortTag() == "!!merge" {
			merged = append(merged, d.merge(val, path, depth)...)
			continue
		}
		own = append(own, pair{key: k, val: val})
	}
	for i := range merged {
		merged[i].merged = true
	}
	return append(own, merged...)
}

func (d *decoder) merge(val *yaml.Node, path string, depth int) []pair {
	if depth >= maxMergeDepth {
		d.fail(val, path, ErrSyntax, "<< merges nested more than %d deep (a merge cycle?)", maxMergeDepth)
		return nil
	}
	m := deref(val)
	if m != nil && m.Kind == yaml.MappingNode {
		return d.pairs(m, path, depth+1)
	}
	if m != nil && m.Kind == yaml.SequenceNode {
		var out []pair
		for _, e := range m.Content {
			if e = deref(e); e == nil || e.Kind != yaml.MappingNode {
				d.fail(val, path, ErrType, "<< merges a mapping or a list of mappings")
				continue
			}
			out = append(out, d.pairs(e, path, depth+1)...)
		}
		return out
	}
	d.fail(val, path, ErrType, "<< merges a mapping or a list of mappings")
	return nil
}

// key is a mapping key's text. Keys are not ${}-expanded.
func (d *decoder) key(k *yaml.Node, path string) (string, bool) {
	if k = deref(k); k == nil || k.Kind != yaml.ScalarNode {
		d.fail(k, path, ErrType, "a key must be a string")
		return "", false
	}
	return k.Value, true
}

func (d *decoder) structValue(n *yaml.Node, path string, v reflect.Value) {
	if n.Kind != yaml.MappingNode {
		d.fail(n, path, ErrType, "want a mapping (key: value), got %s", kindName(n, path))
		return
	}
	fs := fieldsOf(v.Type())
	seen := map[string]int{}
	for _, p := range d.pairs(n, path, 0) {
		name, ok := d.key(p.key, path)
		if !ok {
			continue
		}
		fp := name
		if path != "" {
			fp = path + "." + name
		}
		if first, dup := seen[name]; dup {
			if !p.merged {
				d.fail(p.key, fp, ErrDuplicateKey, "duplicate key (first on line %d)", first)
			}
			continue
		}
		seen[name] = p.key.Line
		f, ok := fs.byName[name]
		if !ok {
			d.fail(p.key, fp, ErrUnknownKey, "unknown key (known: %s)", fs.known)
			continue
		}
		d.lines[fp] = p.key.Line
		d.value(p.val, fp, v.Field(f.index), f.opts)
		if f.setFlag >= 0 && !d.null(p.val, fp) {
			v.Field(f.setFlag).SetBool(true)
		}
	}
}

// null reports whether an (already decoded) value is null.
func (d *decoder) null(n *yaml.Node, path string) bool {
	if n = deref(n); n == nil || n.Kind != yaml.ScalarNode {
		return false
	}
	_, null, ok := d.scalar(n, path)
	return ok && null
}

func (d *decoder) sliceValue(n *yaml.Node, path string, v reflect.Value, opts string) {
	if n.Kind == yaml.ScalarNode && opts == "csv" && v.Type().Elem().Kind() == reflect.String {
		s, _, _ := d.scalar(n, path)
		v.Set(reflect.ValueOf(splitCSV(s)).Convert(v.Type()))
		return
	}
	if n.Kind != yaml.SequenceNode {
		d.fail(n, path, ErrType, "want a list, got %s", kindName(n, path))
		return
	}
	s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
	for i, e := range n.Content {
		ep := path + "[" + strconv.Itoa(i) + "]"
		d.lines[ep] = e.Line
		d.value(e, ep, s.Index(i), "")
	}
	v.Set(s)
}

func (d *decoder) mapValue(n *yaml.Node, path string, v reflect.Value) {
	t := v.Type()
	if n.Kind != yaml.MappingNode {
		d.fail(n, path, ErrType, "want a mapping (key: value), got %s", kindName(n, path))
		return
	}
	m := reflect.MakeMap(t)
	seen := map[string]int{}
	for _, p := range d.pairs(n, path, 0) {
		k, ok := d.key(p.key, path)
		if !ok {
			continue
		}
		fp := mapPath(path, k)
		if first, dup := seen[k]; dup {
			if !p.merged {
				d.fail(p.key, fp, ErrDuplicateKey, "duplicate key (first on line %d)", first)
			}
			continue
		}
		seen[k] = p.key.Line
		d.lines[fp] = p.key.Line
		e := reflect.New(t.Elem()).Elem()
		d.value(p.val, fp, e, "")
		m.SetMapIndex(reflect.ValueOf(k).Convert(t.Key()), e)
	}
	v.Set(m)
}

// mapPath is the path of a user-named key: headers.Authorization, or
// headers["X.Y"] when the key would not read well after a dot.
func mapPath(path, key string) string {
	simple := key != ""
	for i := 0; i < len(key); i++ {
		c := key[i]
		if !(c == '_' || c == '-' || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z') {
			simple = false
			break
		}
	}
	if simple {
		return path + "." + key
	}
	return path + "[" + strconv.Quote(key) + "]"
}

// anyValue decodes an untyped value (handler.http.json.ok_value) with
// yaml.v3, after expanding ${NAME} in its scalars. Expanded plain scalars
// are typed again, so "ok_value: ${OK}" with OK=1 is the number 1.
func (d *decoder) anyValue(n *yaml.Node, path string, v reflect.Value) {
	errs := len(d.errs)
	d.expandTree(n, path, map[*yaml.Node]bool{})
	if len(d.errs) > errs || d.stop {
		return
	}
	var x any
	if err := n.Decode(&x); err != nil {
		d.fail(n, path, ErrType, "%s", strings.TrimPrefix(err.Error(), "yaml: "))
		return
	}
	if x != nil {
		v.Set(reflect.ValueOf(x))
	}
}

// expandTree expands the scalars under n in place, each node once.
func (d *decoder) expandTree(n *yaml.Node, path string, seen map[*yaml.Node]bool) {
	if n == nil || seen[n] || !d.step(n, path) {
		return
	}
	seen[n] = true
	switch n.Kind {
	case yaml.AliasNode:
		d.expandTree(n.Alias, path, seen)
	case yaml.ScalarNode:
		s, _, ok := d.scalar(n, path)
		if ok && s != n.Value {
			n.Value = s
			if n.Style&(yaml.TaggedStyle|yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle|yaml.LiteralStyle|yaml.FoldedStyle) == 0 {
				n.Tag = "" // resolve the expanded text afresh: 1 is a number, true a bool
			}
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i].Value
			d.expandTree(n.Content[i+1], mapPath(path, k), seen)
		}
	default:
		for i, c := range n.Content {
			d.expandTree(c, path+"["+strconv.Itoa(i)+"]", seen)
		}
	}
}

func parseInt(s string, bits int) (int64, error) {
	t := strings.ReplaceAll(strings.TrimSpace(s), "_", "")
	i, err := strconv.ParseInt(t, 10, bits)
	if err != nil {
		if errors.Is(err, strconv.ErrRange) {
			return 0, fmt.Errorf("%s is out of range", strings.TrimSpace(s))
		}
		return 0, fmt.Errorf("want a whole number, got %q", s)
	}
	return i, nil
}

// byteUnits are the suffixes a byte size may carry, lower-cased.
var byteUnits = map[string]int64{
	"": 1, "b": 1,
	"k": 1000, "kb": 1000, "kib": 1 << 10, "ki": 1 << 10,
	"m": 1000 * 1000, "mb": 1000 * 1000, "mib": 1 << 20, "mi": 1 << 20,
	"g": 1000 * 1000 * 1000, "gb": 1000 * 1000 * 1000, "gib": 1 << 30, "gi": 1 << 30,
}

// parseBytes reads a byte size: 1048576, 1_048_576, 1MiB, 64 MB, 512KiB.
func parseBytes(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := 0
	if i < len(t) && (t[i] == '-' || t[i] == '+') {
		i++
	}
	for i < len(t) && ('0' <= t[i] && t[i] <= '9' || t[i] == '_') {
		i++
	}
	num, unit := t[:i], strings.ToLower(strings.TrimSpace(t[i:]))
	mult, ok := byteUnits[unit]
	if !ok {
		return 0, fmt.Errorf("want a byte size such as 1048576 or 1MiB, got %q", s)
	}
	n, err := parseInt(num, 64)
	if err != nil {
		return 0, fmt.Errorf("want a byte size such as 1048576 or 1MiB, got %q", s)
	}
	if n > math.MaxInt64/mult || n < math.MinInt64/mult {
		return 0, fmt.Errorf("%s is out of range", t)
	}
	return n * mult, nil
}

// fields is what the decoder knows of a struct type.
type fields struct {
	byName map[string]field
	known  string // the keys in declaration order, for "unknown key" messages
}

type field struct {
	index   int
	opts    string // `config:"..."`
	setFlag int    // index of the <Name>Set bool, or -1
}

var fieldCache sync.Map // reflect.Type → *fields

func fieldsOf(t reflect.Type) *fields {
	if fs, ok := fieldCache.Load(t); ok {
		return fs.(*fields)
	}
	fs := &fields{byName: map[string]field{}}
	var names []string
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if !f.IsExported() || name == "-" {
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		fl := field{index: i, opts: f.Tag.Get("config"), setFlag: -1}
		if sf, ok := t.FieldByName(f.Name + "Set"); ok && sf.Type.Kind() == reflect.Bool && len(sf.Index) == 1 {
			fl.setFlag = sf.Index[0]
		}
		fs.byName[name] = fl
		names = append(names, name)
	}
	fs.known = strings.Join(names, ", ")
	fieldCache.Store(t, fs)
	return fs
}
