package structured

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// kind is a JSON value's type as its first byte tells it.
type kind uint8

const (
	kObject kind = iota
	kArray
	kString
	kNumber // integer or not: a node that allows only integers says so (node.integer)
	kBool
	kNull
	numKinds
)

func (k kind) String() string {
	return [...]string{"object", "array", "string", "number", "boolean", "null"}[k]
}

// node is a compiled schema: what one value may be. byKind[k] is the node
// that governs a value of kind k (itself for a plain node; the matching
// alternative of an anyOf), nil where the kind is not allowed; a node
// with lits allows exactly those JSON texts instead.
type node struct {
	byKind [numKinds]*node

	// Objects: the declared properties in order (a generation writes them
	// in this order, skipping optional ones), and extra, the schema of
	// other keys (a map object: no declared properties), or nil.
	props []property
	extra *node

	// Arrays.
	items              *node
	minItems, maxItems int // maxItems < 0: no bound

	// Strings, in characters.
	minLen, maxLen int    // maxLen < 0: no bound
	pattern        *regex // the whole string matches it; nil: any

	integer bool     // numbers: integers only
	lits    []string // enum or const: the allowed values' JSON texts, sorted

	// variants, on an object whose first property is a tag with literal
	// values, is the node the object becomes once the tag is read, by the
	// tag's JSON text (ToolCalls: the called function's).
	variants map[string]*node
}

type property struct {
	key      string // JSON text of the name, quotes included
	value    *node
	required bool
}

// maxProperties bounds the declared properties of one object: the key
// being read is matched against a 64-bit set of candidates.
const maxProperties = 64

// anyNode allows any JSON value: objects of any keys, arrays of any items.
var anyNode = func() *node {
	n := &node{maxItems: -1, maxLen: -1}
	n.extra, n.items = n, n
	for k := range n.byKind {
		n.byKind[k] = n
	}
	return n
}()

// anyObject is JSON mode's root: an object of any keys and values.
var anyObject = &node{byKind: [numKinds]*node{kObject: anyNode}, maxItems: -1, maxLen: -1}

// compileSchema compiles a JSON Schema (the subset OpenAI's structured
// outputs and vLLM's guided decoding use) for a generation; the root must
// be an object. Keywords that constrain a value in ways the byte-level
// machine does not check (multipleOf, …) are refused rather than
// ignored; annotations (title, description, format, …) are ignored, as
// JSON Schema makes format an annotation by default. A pattern must
// match the whole string (as xgrammar and outlines read it). An object's
// properties come in the order the schema writes them, and with
// properties an absent additionalProperties means false, as in vLLM's
// default backend (xgrammar).
func compileSchema(raw []byte) (*node, error) {
	root, err := parseJSON(raw)
	if err != nil {
		return nil, fmt.Errorf("schema: %w", err)
	}
	c := &compiler{root: root, refs: map[string]*node{}}
	n, err := c.compile(root, "#")
	if err != nil {
		return nil, err
	}
	if n.lits != nil || n.byKind[kObject] == nil || slices.ContainsFunc(n.byKind[kObject+1:], func(k *node) bool { return k != nil }) {
		return nil, fmt.Errorf(`schema: the root must be an object ("type": "object")`)
	}
	return n, nil
}

type compiler struct {
	root any
	refs map[string]*node // compiled $refs: a recursive schema refers back to its node
}

// Keywords compile reads, and annotations it ignores.
var (
	handled     = []string{"type", "properties", "required", "additionalProperties", "items", "minItems", "maxItems", "minLength", "maxLength", "enum", "const", "anyOf", "oneOf", "$ref", "$defs", "definitions", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "pattern"}
	annotations = []string{"title", "description", "default", "examples", "format", "$schema", "$id", "$comment", "deprecated", "readOnly", "writeOnly", "contentMediaType", "contentEncoding"}
)

func (c *compiler) compile(s any, path string) (*node, error) {
	switch s := s.(type) {
	case bool:
		if !s {
			return nil, fmt.Errorf("schema %s: false allows no value", path)
		}
		return anyNode, nil
	case *object:
		return c.object(s, path)
	}
	return nil, fmt.Errorf("schema %s: must be an object or a boolean", path)
}

func (c *compiler) object(s *object, path string) (*node, error) {
	for _, k := range s.keys {
		if !slices.Contains(handled, k) && !slices.Contains(annotations, k) {
			return nil, fmt.Errorf("schema %s: keyword %q is not supported", path, k)
		}
	}
	if ref, ok := s.get("$ref"); ok {
		if !onlyAnnotations(s, "$ref", "$defs", "definitions") {
			return nil, fmt.Errorf("schema %s: $ref beside other keywords is not supported", path)
		}
		r, ok := ref.(string)
		if !ok {
			return nil, fmt.Errorf("schema %s: $ref must be a string", path)
		}
		return c.ref(r)
	}
	if alts, ok := s.get("anyOf"); ok {
		return c.anyOf(s, alts, path+"/anyOf")
	}
	if alts, ok := s.get("oneOf"); ok {
		return c.anyOf(s, alts, path+"/oneOf")
	}
	n := &node{maxItems: -1, maxLen: -1}
	if v, ok := s.get("enum"); ok {
		vals, ok := v.([]any)
		if !ok || len(vals) == 0 {
			return nil, fmt.Errorf("schema %s: enum must be a non-empty array", path)
		}
		n.setLits(vals)
	}
	if v, ok := s.get("const"); ok {
		if !n.setLits([]any{v}) {
			return nil, fmt.Errorf("schema %s: const is not among enum's values", path)
		}
	}
	kinds, integer, err := types(s, path)
	if err != nil {
		return nil, err
	}
	if has(s, "minimum") || has(s, "maximum") || has(s, "exclusiveMinimum") || has(s, "exclusiveMaximum") {
		if n.lits != nil || !integer || len(kinds) != 1 {
			return nil, fmt.Errorf("schema %s: minimum and maximum are supported on integers alone (\"type\": \"integer\", no enum)", path)
		}
		if err := n.integerRange(s, path); err != nil {
			return nil, err
		}
	}
	if n.lits != nil {
		return n, nil // the listed values are all there is
	}
	n.integer = integer
	for _, k := range kinds {
		n.byKind[k] = n
	}
	if n.byKind[kObject] == nil && (has(s, "properties") || has(s, "additionalProperties") || has(s, "required")) ||
		n.byKind[kArray] == nil && (has(s, "items") || has(s, "minItems") || has(s, "maxItems")) ||
		n.byKind[kString] == nil && (has(s, "minLength") || has(s, "maxLength") || has(s, "pattern")) {
		return nil, fmt.Errorf("schema %s: keywords for a type that \"type\" does not allow", path)
	}
	if n.byKind[kObject] != nil {
		if err := c.objectKeywords(n, s, path); err != nil {
			return nil, err
		}
	}
	if n.byKind[kArray] != nil {
		n.items = anyNode
		if it, ok := s.get("items"); ok {
			if n.items, err = c.compile(it, path+"/items"); err != nil {
				return nil, err
			}
		}
		if n.minItems, n.maxItems, err = bounds(s, "minItems", "maxItems", path); err != nil {
			return nil, err
		}
	}
	if n.byKind[kString] != nil {
		if n.minLen, n.maxLen, err = bounds(s, "minLength", "maxLength", path); err != nil {
			return nil, err
		}
		if p, ok := s.get("pattern"); ok {
			text, ok := p.(string)
			if !ok {
				return nil, fmt.Errorf("schema %s: pattern must be a string", path)
			}
			if has(s, "minLength") || has(s, "maxLength") {
				return nil, fmt.Errorf("schema %s: pattern together with minLength or maxLength is not supported (bound the length in the pattern, as {1,10})", path)
			}
			if n.pattern, err = compileRegex(text); err != nil {
				return nil, fmt.Errorf("schema %s: %w", path, err)
			}
		}
	}
	return n, nil
}

func has(s *object, k string) bool {
	_, ok := s.get(k)
	return ok
}

// onlyAnnotations reports whether every key of s other than allowed is an
// annotation.
func onlyAnnotations(s *object, allowed ...string) bool {
	for _, k := range s.keys {
		if !slices.Contains(allowed, k) && !slices.Contains(annotations, k) {
			return false
		}
	}
	return true
}

// types reads "type": a name or a list of names; every kind when absent.
func types(s *object, path string) (kinds []kind, integer bool, err error) {
	t, ok := s.get("type")
	if !ok {
		return []kind{kObject, kArray, kString, kNumber, kBool, kNull}, false, nil
	}
	var names []string
	switch t := t.(type) {
	case string:
		names = []string{t}
	case []any:
		for _, v := range t {
			name, ok := v.(string)
			if !ok {
				return nil, false, fmt.Errorf("schema %s: type must be a string or a list of strings", path)
			}
			names = append(names, name)
		}
	default:
		return nil, false, fmt.Errorf("schema %s: type must be a string or a list of strings", path)
	}
	integer = slices.Contains(names, "integer") && !slices.Contains(names, "number")
	for _, name := range names {
		k, ok := map[string]kind{"object": kObject, "array": kArray, "string": kString, "number": kNumber, "integer": kNumber, "boolean": kBool, "null": kNull}[name]
		if !ok {
			return nil, false, fmt.Errorf("schema %s: unknown type %q", path, name)
		}
		kinds = append(kinds, k)
	}
	return kinds, integer, nil
}

func (c *compiler) objectKeywords(n *node, s *object, path string) error {
	var required []string
	if r, ok := s.get("required"); ok {
		list, ok := r.([]any)
		if !ok {
			return fmt.Errorf("schema %s: required must be an array of names", path)
		}
		for _, v := range list {
			name, ok := v.(string)
			if !ok {
				return fmt.Errorf("schema %s: required must be an array of names", path)
			}
			required = append(required, name)
		}
	}
	p, declared := s.get("properties")
	if declared {
		props, ok := p.(*object)
		if !ok {
			return fmt.Errorf("schema %s: properties must be an object", path)
		}
		if len(props.keys) > maxProperties {
			return fmt.Errorf("schema %s: %d properties; at most %d are supported", path, len(props.keys), maxProperties)
		}
		for _, name := range props.keys {
			v, err := c.compile(props.vals[name], path+"/properties/"+name)
			if err != nil {
				return err
			}
			n.props = append(n.props, property{key: jsonString(name), value: v, required: slices.Contains(required, name)})
		}
	}
	for _, name := range required {
		if !slices.ContainsFunc(n.props, func(p property) bool { return p.key == jsonString(name) }) {
			return fmt.Errorf("schema %s: required property %q is not declared in properties", path, name)
		}
	}
	// additionalProperties false, or absent beside properties, allows the
	// declared keys only; true or a schema, without properties, makes a
	// map; neither keyword allows any object.
	a, hasExtra := s.get("additionalProperties")
	switch a := a.(type) {
	case nil:
		if hasExtra {
			return fmt.Errorf("schema %s: additionalProperties must be a boolean or a schema", path)
		}
		if !declared {
			n.extra = anyNode
		}
	case bool:
		if a {
			n.extra = anyNode
		}
	case *object:
		extra, err := c.compile(a, path+"/additionalProperties")
		if err != nil {
			return err
		}
		n.extra = extra
	default:
		return fmt.Errorf("schema %s: additionalProperties must be a boolean or a schema", path)
	}
	if n.extra != nil && len(n.props) > 0 {
		return fmt.Errorf("schema %s: properties together with additionalProperties are not supported (a generated object's keys are either declared or free)", path)
	}
	return nil
}

// jsonString is s as a JSON string, quotes included.
func jsonString(s string) string {
	var b bytes.Buffer
	writeString(&b, s)
	return b.String()
}

// bounds reads a pair of non-negative integer bounds; max is -1 when absent.
func bounds(s *object, minKey, maxKey, path string) (lo, hi int, err error) {
	hi = -1
	for key, dst := range map[string]*int{minKey: &lo, maxKey: &hi} {
		v, ok := s.get(key)
		if !ok {
			continue
		}
		num, _ := v.(json.Number)
		f, err := strconv.ParseInt(string(num), 10, 32)
		if err != nil || f < 0 || f > 1<<20 {
			return 0, 0, fmt.Errorf("schema %s: %s must be a non-negative integer up to 2^20", path, key)
		}
		*dst = int(f)
	}
	if hi >= 0 && lo > hi {
		return 0, 0, fmt.Errorf("schema %s: %s %d is above %s %d", path, minKey, lo, maxKey, hi)
	}
	return lo, hi, nil
}

// setLits makes n allow exactly the JSON texts of vals (compact, numbers
// as the schema writes them), or, when it has some already (const after
// enum), those of them among vals; it reports whether any is left.
func (n *node) setLits(vals []any) bool {
	var lits []string
	for _, v := range vals {
		var b bytes.Buffer
		compactJSON(&b, v)
		lits = append(lits, b.String())
	}
	slices.Sort(lits)
	lits = slices.Compact(lits)
	if n.lits != nil {
		lits = slices.DeleteFunc(lits, func(l string) bool {
			_, ok := slices.BinarySearch(n.lits, l)
			return !ok
		})
	}
	n.lits = lits
	return len(lits) > 0
}

// maxRange is the most integers a bounded integer may take: they become
// the node's literals, which the byte machine matches exactly.
const maxRange = 4096

// integerRange makes n allow the integers between the schema's bounds,
// both of which it needs, at most maxRange of them.
func (n *node) integerRange(s *object, path string) error {
	lo, hi, haveLo, haveHi := int64(0), int64(0), false, false
	for key, step := range map[string]int64{"minimum": 0, "exclusiveMinimum": 1, "maximum": 0, "exclusiveMaximum": -1} {
		v, ok := s.get(key)
		if !ok {
			continue
		}
		num, _ := v.(json.Number)
		f, err := strconv.ParseFloat(string(num), 64)
		if err != nil || f != math.Trunc(f) || math.Abs(f) > 1<<53 {
			return fmt.Errorf("schema %s: %s must be an integer", path, key)
		}
		b := int64(f) + step
		if strings.HasSuffix(key, "inimum") {
			if !haveLo || b > lo {
				lo = b
			}
			haveLo = true
		} else {
			if !haveHi || b < hi {
				hi = b
			}
			haveHi = true
		}
	}
	if !haveLo || !haveHi || hi < lo || hi-lo >= maxRange {
		return fmt.Errorf("schema %s: an integer's bounds must both be set and span at most %d values", path, maxRange)
	}
	for v := lo; v <= hi; v++ {
		n.lits = append(n.lits, strconv.FormatInt(v, 10))
	}
	slices.Sort(n.lits)
	return nil
}

// anyOf compiles alternatives that a value's first byte tells apart: each
// kind of value may come from at most one of them.
func (c *compiler) anyOf(s *object, alts any, path string) (*node, error) {
	if !onlyAnnotations(s, "anyOf", "oneOf", "$defs", "definitions") || has(s, "anyOf") && has(s, "oneOf") {
		return nil, fmt.Errorf("schema %s: anyOf or oneOf beside other keywords is not supported", path)
	}
	list, ok := alts.([]any)
	if !ok || len(list) == 0 {
		return nil, fmt.Errorf("schema %s: must be a non-empty array of schemas", path)
	}
	n := &node{maxItems: -1, maxLen: -1}
	for i, a := range list {
		alt, err := c.compile(a, fmt.Sprintf("%s/%d", path, i))
		if err != nil {
			return nil, err
		}
		if alt.lits != nil {
			return nil, fmt.Errorf("schema %s/%d: enum or const inside anyOf is not supported", path, i)
		}
		// The alternative's kinds come from its text: a recursive $ref
		// compiles to a node that is filled in only later.
		kinds, err := c.kinds(a, 0)
		if err != nil {
			return nil, err
		}
		for _, k := range kinds {
			if n.byKind[k] != nil {
				return nil, fmt.Errorf("schema %s: two alternatives allow %s values; alternatives must differ in type", path, k)
			}
			n.byKind[k] = alt // resolved to the alternative's own node for k when a value starts (jsonState.value)
		}
	}
	return n, nil
}

// kinds lists the kinds of value schema s allows, read from its text.
func (c *compiler) kinds(s any, depth int) ([]kind, error) {
	all := []kind{kObject, kArray, kString, kNumber, kBool, kNull}
	o, ok := s.(*object)
	if !ok || depth > 64 {
		if depth > 64 {
			return nil, fmt.Errorf("schema: $ref chain too long")
		}
		return all, nil // true (false does not compile)
	}
	if ref, ok := o.get("$ref"); ok {
		r, _ := ref.(string)
		target, err := c.resolve(r)
		if err != nil {
			return nil, err
		}
		return c.kinds(target, depth+1)
	}
	for _, key := range []string{"anyOf", "oneOf"} {
		if alts, ok := o.get(key); ok {
			list, ok := alts.([]any)
			if !ok {
				return nil, fmt.Errorf("schema: %s must be a non-empty array of schemas", key)
			}
			var out []kind
			for _, a := range list {
				ks, err := c.kinds(a, depth+1)
				if err != nil {
					return nil, err
				}
				out = append(out, ks...)
			}
			return out, nil
		}
	}
	ks, _, err := types(o, "")
	return ks, err
}

// resolve returns the schema a local reference points to: "#" (the
// root), "#/$defs/Name", "#/definitions/Name", or another JSON pointer.
func (c *compiler) resolve(r string) (any, error) {
	rest, ok := strings.CutPrefix(r, "#")
	if !ok || rest != "" && rest[0] != '/' {
		return nil, fmt.Errorf("schema: $ref %q: only local references (#/...) are supported", r)
	}
	target := c.root
	for _, part := range strings.Split(rest, "/")[1:] {
		part = strings.ReplaceAll(strings.ReplaceAll(part, "~1", "/"), "~0", "~")
		m, ok := target.(*object)
		if !ok {
			return nil, fmt.Errorf("schema: $ref %q does not resolve", r)
		}
		if target, ok = m.get(part); !ok {
			return nil, fmt.Errorf("schema: $ref %q does not resolve", r)
		}
	}
	return target, nil
}

// ref compiles a local reference: "#" (the root), "#/$defs/Name",
// "#/definitions/Name", or any other JSON pointer into the schema.
func (c *compiler) ref(r string) (*node, error) {
	if n, ok := c.refs[r]; ok {
		return n, nil
	}
	target, err := c.resolve(r)
	if err != nil {
		return nil, err
	}
	// A placeholder first, so that a schema that refers to itself
	// compiles to a node that points back to its own.
	n := &node{}
	c.refs[r] = n
	compiled, err := c.compile(target, r)
	if err != nil {
		return nil, err
	}
	*n = *compiled
	for k, sub := range n.byKind {
		if sub == compiled {
			n.byKind[k] = n
		}
	}
	if n.items == compiled {
		n.items = n
	}
	if n.extra == compiled {
		n.extra = n
	}
	return n, nil
}
