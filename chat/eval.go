package chat

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
)

// RaiseError is the error of a template that called raise_exception(msg);
// its Error() is msg. Templates raise it for conversations they reject
// (roles out of order, an unsupported role), so a server answers it as a
// client error.
type RaiseError struct{ Message string }

func (e *RaiseError) Error() string { return e.Message }

// ValueError is a value given to Render that a template cannot be given
// (JSON nested too deeply, a type Extra does not take); Where names it,
// as messages[2] or Options.Extra["tools"]. It is the caller's input, not
// the template, at fault.
type ValueError struct {
	Where string
	Err   error
}

func (e *ValueError) Error() string { return "chat: " + e.Where + ": " + e.Err.Error() }

func (e *ValueError) Unwrap() error { return e.Err }

// LimitError is a render stopped by Options' limits (MaxSteps, MaxBytes)
// or by too deep macro recursion.
type LimitError struct{ Msg string }

func (e *LimitError) Error() string { return "chat: template " + e.Msg }

// renderError is a template failing at run time (a type error, an
// undefined value used, ...), with its line.
type renderError struct {
	line int
	err  error
}

func (e *renderError) Error() string {
	return fmt.Sprintf("chat: template error at line %d: %v", e.line, e.err)
}

func (e *renderError) Unwrap() error { return e.err }

// maxCallDepth bounds macro recursion (Python's default recursion limit
// stops Jinja2 at about the same depth).
const maxCallDepth = 100

type frame struct {
	vars   map[string]any
	parent *frame
}

func newFrame(parent *frame) *frame { return &frame{parent: parent} }

func (f *frame) set(name string, v any) {
	if f.vars == nil {
		f.vars = make(map[string]any, 4)
	}
	f.vars[name] = v
}

func (f *frame) lookup(name string) (any, bool) {
	for ; f != nil; f = f.parent {
		if v, ok := f.vars[name]; ok {
			return v, true
		}
	}
	return nil, false
}

type flow int

const (
	flowNormal flow = iota
	flowBreak
	flowContinue
)

// renderer is the state of one Render call.
type renderer struct {
	steps, maxSteps int
	maxBytes        int
	depth           int
	now             func() time.Time
}

// step counts one unit of work against MaxSteps.
func (r *renderer) step(n int) error {
	r.steps += n
	if r.steps > r.maxSteps {
		return &LimitError{Msg: fmt.Sprintf("exceeded %d steps", r.maxSteps)}
	}
	return nil
}

// checkSize fails when a value being built exceeds MaxBytes.
func (r *renderer) checkSize(n int) error {
	if n > r.maxBytes {
		return &LimitError{Msg: fmt.Sprintf("built a value over %d bytes", r.maxBytes)}
	}
	return nil
}

func (r *renderer) write(b *strings.Builder, s string) error {
	if err := r.checkSize(b.Len() + len(s)); err != nil {
		return err
	}
	b.WriteString(s)
	return nil
}

// wrap gives an error without a line the line of the node it came from;
// raise_exception and limit errors pass unchanged.
func wrap(line int, err error) error {
	if err == nil {
		return nil
	}
	var re *RaiseError
	var le *LimitError
	var rerr *renderError
	if errors.As(err, &re) || errors.As(err, &le) || errors.As(err, &rerr) {
		return err
	}
	return &renderError{line: line, err: err}
}

func (r *renderer) execBody(b *strings.Builder, body []node, f *frame) (flow, error) {
	for _, n := range body {
		fl, err := r.exec(b, n, f)
		if err != nil || fl != flowNormal {
			return fl, err
		}
	}
	return flowNormal, nil
}

func (r *renderer) exec(b *strings.Builder, n node, f *frame) (flow, error) {
	if err := r.step(1); err != nil {
		return flowNormal, err
	}
	switch n := n.(type) {
	case *textNode:
		return flowNormal, r.write(b, n.text)
	case *outputNode:
		v, err := r.eval(n.expr, f)
		if err != nil {
			return flowNormal, wrap(n.line, err)
		}
		return flowNormal, r.write(b, str(v))
	case *ifNode:
		for i, c := range n.conds {
			v, err := r.eval(c, f)
			if err != nil {
				return flowNormal, err
			}
			if truth(v) {
				return r.execBody(b, n.bodies[i], f)
			}
		}
		return r.execBody(b, n.orelse, f)
	case *forNode:
		return flowNormal, r.execFor(b, n, f)
	case *setNode:
		return flowNormal, wrap(n.line, r.execSet(n, f))
	case *setBlockNode:
		var sb strings.Builder
		if _, err := r.execBody(&sb, n.body, f); err != nil {
			return flowNormal, err
		}
		v, err := r.applyFilters(sb.String(), n.filters, f)
		if err != nil {
			return flowNormal, err
		}
		f.set(n.name, v)
		return flowNormal, nil
	case *filterBlockNode:
		var sb strings.Builder
		fl, err := r.execBody(&sb, n.body, f)
		if err != nil {
			return flowNormal, err
		}
		v, err := r.applyFilters(sb.String(), n.filters, f)
		if err != nil {
			return flowNormal, err
		}
		return fl, r.write(b, str(v))
	case *macroNode:
		f.set(n.name, r.macro(n, f))
		return flowNormal, nil
	case *breakNode:
		return flowBreak, nil
	case *continueNode:
		return flowContinue, nil
	}
	return flowNormal, fmt.Errorf("chat: unknown node %T", n)
}

func (r *renderer) applyFilters(v any, fs []*filterExpr, f *frame) (any, error) {
	for _, fe := range fs {
		var err error
		if v, err = r.callFilter(fe, v, f); err != nil {
			return nil, wrap(fe.line, err)
		}
	}
	return v, nil
}

// loopInfo is the "loop" variable of a for block.
type loopInfo struct {
	items   []any
	index   int // 0-based
	changed any // the arguments of the last loop.changed call, as a tuple
}

func (l *loopInfo) attr(name string) (any, bool) {
	n := int64(len(l.items))
	i := int64(l.index)
	switch name {
	case "index":
		return i + 1, true
	case "index0":
		return i, true
	case "revindex":
		return n - i, true
	case "revindex0":
		return n - i - 1, true
	case "first":
		return i == 0, true
	case "last":
		return i == n-1, true
	case "length":
		return n, true
	case "depth":
		return int64(1), true
	case "depth0":
		return int64(0), true
	case "previtem":
		if i == 0 {
			return undefined{hint: "there is no previous item"}, true
		}
		return l.items[i-1], true
	case "nextitem":
		if i == n-1 {
			return undefined{hint: "there is no next item"}, true
		}
		return l.items[i+1], true
	case "changed":
		return &function{name: "loop.changed", call: func(_ *renderer, args []any, _ *dict) (any, error) {
			if l.changed != nil && equal(l.changed, tuple(args)) {
				return false, nil
			}
			l.changed = tuple(args)
			return true, nil
		}}, true
	case "cycle":
		return &function{name: "loop.cycle", call: func(_ *renderer, args []any, _ *dict) (any, error) {
			if len(args) == 0 {
				return nil, fmt.Errorf("no items for cycling given")
			}
			return args[l.index%len(args)], nil
		}}, true
	}
	return nil, false
}

func (r *renderer) execFor(b *strings.Builder, n *forNode, f *frame) error {
	iv, err := r.eval(n.iter, f)
	if err != nil {
		return err
	}
	items, err := iterate(iv)
	if err != nil {
		return wrap(n.line, err)
	}
	bind := func(fr *frame, item any) error { return unpack(fr, n.targets, item) }
	if n.cond != nil {
		var kept []any
		for _, item := range items {
			if err := r.step(1); err != nil {
				return err
			}
			fr := newFrame(f)
			if err := bind(fr, item); err != nil {
				return wrap(n.line, err)
			}
			v, err := r.eval(n.cond, fr)
			if err != nil {
				return err
			}
			if truth(v) {
				kept = append(kept, item)
			}
		}
		items = kept
	}
	if len(items) == 0 {
		_, err := r.execBody(b, n.orelse, f)
		return err
	}
	loop := &loopInfo{items: items}
	for i, item := range items {
		if err := r.step(1); err != nil {
			return err
		}
		loop.index = i
		fr := newFrame(f)
		fr.set("loop", loop)
		if err := bind(fr, item); err != nil {
			return wrap(n.line, err)
		}
		fl, err := r.execBody(b, n.body, fr)
		if err != nil {
			return err
		}
		if fl == flowBreak {
			break
		}
	}
	return nil
}

func (r *renderer) execSet(n *setNode, f *frame) error {
	v, err := r.eval(n.value, f)
	if err != nil {
		return err
	}
	if n.nsAttr != "" {
		obj, ok := f.lookup(n.targets[0])
		ns, isNS := obj.(*namespace)
		if !ok || !isNS {
			return fmt.Errorf("cannot assign attribute on non-namespace object '%s'", n.targets[0])
		}
		ns.attrs.set(n.nsAttr, v)
		return nil
	}
	return unpack(f, n.targets, v)
}

// unpack binds v to targets in fr: the value itself for one name, else its
// items one per name, as Python's tuple unpacking (for and set share it).
func unpack(fr *frame, targets []string, v any) error {
	if len(targets) == 1 {
		fr.set(targets[0], v)
		return nil
	}
	parts, err := iterate(v)
	if err != nil {
		return err
	}
	if len(parts) != len(targets) {
		return fmt.Errorf("cannot unpack %d values into %d names", len(parts), len(targets))
	}
	for i, t := range targets {
		fr.set(t, parts[i])
	}
	return nil
}

// macro makes the callable of a {% macro %}: it renders its body in a new
// frame over the one it was defined in and returns the text.
func (r *renderer) macro(n *macroNode, def *frame) *function {
	return &function{name: n.name, call: func(r *renderer, args []any, kwargs *dict) (any, error) {
		if len(args) > len(n.params) {
			return nil, fmt.Errorf("macro '%s' takes not more than %d argument(s)", n.name, len(n.params))
		}
		r.depth++
		defer func() { r.depth-- }()
		if r.depth > maxCallDepth {
			return nil, &LimitError{Msg: fmt.Sprintf("exceeded %d nested macro calls", maxCallDepth)}
		}
		fr := newFrame(def)
		firstDefault := len(n.params) - len(n.defaults)
		for i, p := range n.params {
			switch {
			case i < len(args):
				fr.set(p, args[i])
			default:
				if v, ok := kwargs.get(p); ok {
					fr.set(p, v)
				} else if i >= firstDefault {
					v, err := r.eval(n.defaults[i-firstDefault], fr)
					if err != nil {
						return nil, err
					}
					fr.set(p, v)
				} else {
					fr.set(p, undefined{hint: fmt.Sprintf("parameter '%s' was not provided", p)})
				}
			}
		}
		if kwargs != nil {
			for _, k := range kwargs.keys {
				if s, ok := k.(string); !ok || !containsString(n.params, s) {
					return nil, fmt.Errorf("macro '%s' takes no keyword argument '%v'", n.name, k)
				}
			}
		}
		var sb strings.Builder
		if _, err := r.execBody(&sb, n.body, fr); err != nil {
			return nil, err
		}
		return sb.String(), nil
	}}
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func (r *renderer) eval(e expr, f *frame) (any, error) {
	if err := r.step(1); err != nil {
		return nil, err
	}
	switch e := e.(type) {
	case *literal:
		return e.val, nil
	case *nameRef:
		if v, ok := f.lookup(e.name); ok {
			return v, nil
		}
		return undefined{hint: fmt.Sprintf("'%s' is undefined", e.name)}, nil
	case *listExpr:
		items := make([]any, len(e.items))
		for i, x := range e.items {
			v, err := r.eval(x, f)
			if err != nil {
				return nil, err
			}
			items[i] = v
		}
		return items, nil
	case *tupleExpr:
		items := make(tuple, len(e.items))
		for i, x := range e.items {
			v, err := r.eval(x, f)
			if err != nil {
				return nil, err
			}
			items[i] = v
		}
		return items, nil
	case *dictExpr:
		d := newDict(len(e.keys))
		for i := range e.keys {
			k, err := r.eval(e.keys[i], f)
			if err != nil {
				return nil, err
			}
			if !hashable(k) {
				return nil, fmt.Errorf("unhashable type: '%s'", typeName(k))
			}
			v, err := r.eval(e.vals[i], f)
			if err != nil {
				return nil, err
			}
			d.set(k, v)
		}
		return d, nil
	case *attrExpr:
		obj, err := r.eval(e.obj, f)
		if err != nil {
			return nil, err
		}
		v, err := getAttr(obj, e.name)
		return v, wrap(e.line, err)
	case *itemExpr:
		obj, err := r.eval(e.obj, f)
		if err != nil {
			return nil, err
		}
		idx, err := r.eval(e.index, f)
		if err != nil {
			return nil, err
		}
		v, err := getItem(obj, idx)
		return v, wrap(e.line, err)
	case *sliceExpr:
		v, err := r.evalSlice(e, f)
		return v, wrap(e.line, err)
	case *callExpr:
		v, err := r.evalCall(e, f)
		return v, wrap(e.line, err)
	case *filterExpr:
		v, err := r.eval(e.obj, f)
		if err != nil {
			return nil, err
		}
		v, err = r.callFilter(e, v, f)
		return v, wrap(e.line, err)
	case *testExpr:
		v, err := r.eval(e.obj, f)
		if err != nil {
			return nil, err
		}
		args, err := r.evalList(e.args, f)
		if err != nil {
			return nil, err
		}
		ok, err := tests[e.name](r, v, args)
		if err != nil {
			return nil, wrap(e.line, err)
		}
		return ok != e.negate, nil
	case *unaryExpr:
		x, err := r.eval(e.x, f)
		if err != nil {
			return nil, err
		}
		v, err := unary(e.op, x)
		return v, wrap(e.line, err)
	case *binaryExpr:
		return r.evalBinary(e, f)
	case *compareExpr:
		return r.evalCompare(e, f)
	case *condExpr:
		c, err := r.eval(e.cond, f)
		if err != nil {
			return nil, err
		}
		if truth(c) {
			return r.eval(e.then, f)
		}
		if e.orelse == nil {
			return undefined{hint: "the inline if-expression evaluated to false and no else section was defined"}, nil
		}
		return r.eval(e.orelse, f)
	}
	return nil, fmt.Errorf("chat: unknown expression %T", e)
}

func (r *renderer) evalList(es []expr, f *frame) ([]any, error) {
	if len(es) == 0 {
		return nil, nil
	}
	out := make([]any, len(es))
	for i, e := range es {
		v, err := r.eval(e, f)
		if err != nil {
			return nil, err
		}
		out[i] = v
	}
	return out, nil
}

func (r *renderer) evalKwargs(kws []kwarg, f *frame) (*dict, error) {
	d := newDict(len(kws))
	for _, kw := range kws {
		v, err := r.eval(kw.val, f)
		if err != nil {
			return nil, err
		}
		d.set(kw.name, v)
	}
	return d, nil
}

func (r *renderer) evalCall(e *callExpr, f *frame) (any, error) {
	fn, err := r.eval(e.fn, f)
	if err != nil {
		return nil, err
	}
	args, err := r.evalList(e.args, f)
	if err != nil {
		return nil, err
	}
	kwargs, err := r.evalKwargs(e.kwargs, f)
	if err != nil {
		return nil, err
	}
	switch fn := fn.(type) {
	case *function:
		return fn.call(r, args, kwargs)
	case undefined:
		return nil, fn.err()
	}
	return nil, fmt.Errorf("'%s' object is not callable", typeName(fn))
}

func (r *renderer) callFilter(e *filterExpr, v any, f *frame) (any, error) {
	args, err := r.evalList(e.args, f)
	if err != nil {
		return nil, err
	}
	kwargs, err := r.evalKwargs(e.kwargs, f)
	if err != nil {
		return nil, err
	}
	return filters[e.name](r, v, args, kwargs)
}

func (r *renderer) evalBinary(e *binaryExpr, f *frame) (any, error) {
	l, err := r.eval(e.l, f)
	if err != nil {
		return nil, err
	}
	switch e.op {
	case "and":
		if !truth(l) {
			return l, nil
		}
		return r.eval(e.r, f)
	case "or":
		if truth(l) {
			return l, nil
		}
		return r.eval(e.r, f)
	}
	rv, err := r.eval(e.r, f)
	if err != nil {
		return nil, err
	}
	v, err := r.binary(e.op, l, rv)
	return v, wrap(e.line, err)
}

func (r *renderer) evalCompare(e *compareExpr, f *frame) (any, error) {
	l, err := r.eval(e.first, f)
	if err != nil {
		return nil, err
	}
	for i, op := range e.ops {
		rv, err := r.eval(e.rest[i], f)
		if err != nil {
			return nil, err
		}
		ok, err := compareOp(op, l, rv)
		if err != nil {
			return nil, wrap(e.line, err)
		}
		if !ok {
			return false, nil
		}
		l = rv
	}
	return true, nil
}

func compareOp(op string, l, r any) (bool, error) {
	switch op {
	case "==":
		return equal(l, r), nil
	case "!=":
		return !equal(l, r), nil
	case "in":
		return contains(r, l)
	case "not in":
		ok, err := contains(r, l)
		return !ok, err
	}
	c, err := compare(l, r)
	if err != nil {
		return false, err
	}
	switch op {
	case "<":
		return c == -1, nil
	case "<=":
		return c == -1 || c == 0, nil
	case ">":
		return c == 1, nil
	default: // ">="
		return c == 1 || c == 0, nil
	}
}

func unary(op string, x any) (any, error) {
	if op == "not" {
		return !truth(x), nil
	}
	n, ok := asNumber(x)
	if !ok {
		if u, isU := x.(undefined); isU {
			return nil, u.err()
		}
		return nil, fmt.Errorf("bad operand type for unary %s: '%s'", op, typeName(x))
	}
	if op == "+" {
		return n, nil
	}
	if i, ok := n.(int64); ok {
		if i == math.MinInt64 {
			return nil, fmt.Errorf("integer overflow")
		}
		return -i, nil
	}
	return -n.(float64), nil
}

// binary applies an arithmetic operator with Python's semantics.
func (r *renderer) binary(op string, l, rv any) (any, error) {
	if op == "~" {
		s := str(l) + str(rv)
		return s, r.checkSize(len(s))
	}
	if u, ok := l.(undefined); ok {
		return nil, u.err()
	}
	if u, ok := rv.(undefined); ok {
		return nil, u.err()
	}
	ln, lNum := asNumber(l)
	rn, rNum := asNumber(rv)
	if lNum && rNum {
		return arith(op, ln, rn)
	}
	switch op {
	case "+":
		switch a := l.(type) {
		case string:
			if b, ok := rv.(string); ok {
				if err := r.checkSize(len(a) + len(b)); err != nil {
					return nil, err
				}
				return a + b, nil
			}
			return nil, fmt.Errorf("can only concatenate str (not \"%s\") to str", typeName(rv))
		case []any:
			if b, ok := rv.([]any); ok {
				if err := r.checkSize(8 * (len(a) + len(b))); err != nil {
					return nil, err
				}
				return append(append(make([]any, 0, len(a)+len(b)), a...), b...), nil
			}
			return nil, fmt.Errorf("can only concatenate list (not \"%s\") to list", typeName(rv))
		case tuple:
			if b, ok := rv.(tuple); ok {
				if err := r.checkSize(8 * (len(a) + len(b))); err != nil {
					return nil, err
				}
				return append(append(make(tuple, 0, len(a)+len(b)), a...), b...), nil
			}
		}
	case "*":
		if n, ok := rn.(int64); ok && rNum {
			return r.repeat(l, n)
		}
		if n, ok := ln.(int64); ok && lNum {
			return r.repeat(rv, n)
		}
	case "%":
		if s, ok := l.(string); ok {
			out, err := printf(s, rv)
			if err != nil {
				return nil, err
			}
			return out, r.checkSize(len(out))
		}
	}
	return nil, fmt.Errorf("unsupported operand type(s) for %s: '%s' and '%s'", op, typeName(l), typeName(rv))
}

// repeat is Python's sequence * n.
func (r *renderer) repeat(seq any, n int64) (any, error) {
	n = max(n, 0)
	switch s := seq.(type) {
	case string:
		if err := r.checkSize(len(s) * int(min(n, math.MaxInt32))); err != nil {
			return nil, err
		}
		return strings.Repeat(s, int(n)), nil
	case []any:
		if err := r.checkSize(8 * len(s) * int(min(n, math.MaxInt32))); err != nil {
			return nil, err
		}
		out := make([]any, 0, len(s)*int(n))
		for i := int64(0); i < n; i++ {
			out = append(out, s...)
		}
		return out, nil
	}
	return nil, fmt.Errorf("can't multiply sequence by non-int of type '%s'", typeName(seq))
}

func arith(op string, l, r any) (any, error) {
	li, lInt := l.(int64)
	ri, rInt := r.(int64)
	if lInt && rInt {
		switch op {
		case "+":
			s := li + ri
			if (s > li) != (ri > 0) {
				return nil, fmt.Errorf("integer overflow")
			}
			return s, nil
		case "-":
			s := li - ri
			if (s < li) != (ri > 0) {
				return nil, fmt.Errorf("integer overflow")
			}
			return s, nil
		case "*":
			if li != 0 && ri != 0 {
				p := li * ri
				if p/ri != li || (li == -1 && ri == math.MinInt64) || (ri == -1 && li == math.MinInt64) {
					return nil, fmt.Errorf("integer overflow")
				}
				return p, nil
			}
			return int64(0), nil
		case "//", "%":
			if ri == 0 {
				return nil, fmt.Errorf("integer division or modulo by zero")
			}
			if li == math.MinInt64 && ri == -1 {
				return nil, fmt.Errorf("integer overflow")
			}
			q, m := li/ri, li%ri
			if m != 0 && (m < 0) != (ri < 0) {
				q--
				m += ri
			}
			if op == "//" {
				return q, nil
			}
			return m, nil
		case "**":
			if li == -1 && ri >= 0 {
				return 1 - 2*(ri&1), nil
			}
			if ri >= 0 {
				p := int64(1)
				for k := int64(0); k < ri; k++ {
					n := p * li
					if li != 0 && n/li != p {
						return nil, fmt.Errorf("integer overflow")
					}
					p = n
					if p == 0 || p == 1 && li == 1 {
						break
					}
				}
				return p, nil
			}
		}
	}
	a, b := toFloat(l), toFloat(r)
	switch op {
	case "+":
		return a + b, nil
	case "-":
		return a - b, nil
	case "*":
		return a * b, nil
	case "/":
		if b == 0 {
			return nil, fmt.Errorf("division by zero")
		}
		return a / b, nil
	case "//":
		if b == 0 {
			return nil, fmt.Errorf("float floor division by zero")
		}
		return math.Floor(a / b), nil
	case "%":
		if b == 0 {
			return nil, fmt.Errorf("float modulo")
		}
		m := math.Mod(a, b)
		if m != 0 && (m < 0) != (b < 0) {
			m += b
		}
		return m, nil
	case "**":
		if a == 0 && b < 0 {
			return nil, fmt.Errorf("0.0 cannot be raised to a negative power")
		}
		return math.Pow(a, b), nil
	}
	return nil, fmt.Errorf("unsupported operator %s", op)
}

func (r *renderer) evalSlice(e *sliceExpr, f *frame) (any, error) {
	obj, err := r.eval(e.obj, f)
	if err != nil {
		return nil, err
	}
	var bounds [3]*int64
	for i, x := range []expr{e.start, e.stop, e.step} {
		if x == nil {
			continue
		}
		v, err := r.eval(x, f)
		if err != nil {
			return nil, err
		}
		if v == nil {
			continue
		}
		n, ok := v.(int64)
		if !ok {
			if b, isBool := v.(bool); isBool {
				n, ok = map[bool]int64{false: 0, true: 1}[b], true
			}
		}
		if !ok {
			return nil, fmt.Errorf("slice indices must be integers or None, not %s", typeName(v))
		}
		bounds[i] = &n
	}
	return slice(obj, bounds[0], bounds[1], bounds[2])
}

// slice is Python's obj[start:stop:step].
func slice(obj any, start, stop, step *int64) (any, error) {
	var items []any
	var runes []rune
	n := 0
	switch o := obj.(type) {
	case []any:
		items, n = o, len(o)
	case tuple:
		items, n = o, len(o)
	case string:
		runes = []rune(o)
		n = len(runes)
	case undefined:
		return nil, o.err()
	default:
		return nil, fmt.Errorf("'%s' object is not subscriptable", typeName(obj))
	}
	st := int64(1)
	if step != nil {
		st = *step
	}
	if st == 0 {
		return nil, fmt.Errorf("slice step cannot be zero")
	}
	ln := int64(n)
	clamp := func(p *int64, def, lo, hi int64) int64 {
		if p == nil {
			return def
		}
		v := *p
		if v < 0 {
			v += ln
		}
		return max(lo, min(v, hi))
	}
	var idx []int
	if st > 0 {
		a, b := clamp(start, 0, 0, ln), clamp(stop, ln, 0, ln)
		for i := a; i < b; i += st {
			idx = append(idx, int(i))
		}
	} else {
		a, b := clamp(start, ln-1, -1, ln-1), clamp(stop, -1, -1, ln-1)
		for i := a; i > b; i += st {
			idx = append(idx, int(i))
		}
	}
	if _, isStr := obj.(string); isStr {
		out := make([]rune, len(idx))
		for k, i := range idx {
			out[k] = runes[i]
		}
		return string(out), nil
	}
	out := make([]any, len(idx))
	for k, i := range idx {
		out[k] = items[i]
	}
	if _, isTuple := obj.(tuple); isTuple {
		return tuple(out), nil
	}
	return out, nil
}

// getAttr is Jinja2's obj.name: an attribute (a method) first, then an
// item.
func getAttr(obj any, name string) (any, error) {
	switch o := obj.(type) {
	case undefined:
		return nil, o.err()
	case *loopInfo:
		if v, ok := o.attr(name); ok {
			return v, nil
		}
	case *namespace:
		if v, ok := o.attrs.get(name); ok {
			return v, nil
		}
	}
	if m, ok := method(obj, name); ok {
		return m, nil
	}
	if d, ok := obj.(*dict); ok {
		if v, ok := d.get(name); ok {
			return v, nil
		}
	}
	return undefined{hint: fmt.Sprintf("'%s object' has no attribute '%s'", typeName(obj), name)}, nil
}

// getItem is Jinja2's obj[key]: an item first, then an attribute.
func getItem(obj any, key any) (any, error) {
	if b, ok := key.(bool); ok {
		if _, isDict := obj.(*dict); !isDict {
			key = map[bool]int64{false: 0, true: 1}[b]
		}
	}
	switch o := obj.(type) {
	case undefined:
		return nil, o.err()
	case *dict:
		if v, ok := o.get(key); ok {
			return v, nil
		}
	case []any, tuple, string:
		if i, ok := key.(int64); ok {
			var n int
			switch o := o.(type) {
			case []any:
				n = len(o)
			case tuple:
				n = len(o)
			case string:
				rs := []rune(o)
				if i < 0 {
					i += int64(len(rs))
				}
				if i >= 0 && i < int64(len(rs)) {
					return string(rs[i]), nil
				}
				return undefined{hint: fmt.Sprintf("'str object' has no element %d", key)}, nil
			}
			if i < 0 {
				i += int64(n)
			}
			if i >= 0 && i < int64(n) {
				if l, isList := o.([]any); isList {
					return l[i], nil
				}
				return o.(tuple)[i], nil
			}
			return undefined{hint: fmt.Sprintf("'%s object' has no element %d", typeName(obj), key)}, nil
		}
	}
	if s, ok := key.(string); ok {
		return getAttr(obj, s)
	}
	return undefined{hint: fmt.Sprintf("'%s object' has no element %s", typeName(obj), repr(key))}, nil
}
