package chat

import (
	"fmt"
	"strconv"
)

// The parser follows Jinja2's grammar and operator precedence (loosest
// first): "x if c else y", or, and, not, comparisons and "in", + and -,
// "~", * / // %, **, unary - and +, then primaries with their postfixes
// (.attr, [index], [slice], (call)), filters (|f) and tests (is t).

// Statements.
type (
	node any

	textNode struct{ text string }

	outputNode struct {
		line int
		expr expr
	}

	ifNode struct {
		conds  []expr
		bodies [][]node
		orelse []node
	}

	forNode struct {
		line    int
		targets []string // one name, or several to unpack each item
		iter    expr
		cond    expr // the "if" filter of the loop, or nil
		body    []node
		orelse  []node
	}

	// setNode assigns to names, or to one namespace attribute.
	setNode struct {
		line    int
		targets []string
		nsAttr  string // set ns.attr = ...: targets holds ns
		value   expr
	}

	// setBlockNode captures a rendered body: {% set x %}...{% endset %}.
	setBlockNode struct {
		name    string
		filters []*filterExpr
		body    []node
	}

	filterBlockNode struct {
		filters []*filterExpr
		body    []node
	}

	macroNode struct {
		line     int
		name     string
		params   []string
		defaults []expr // aligned with the last len(defaults) params
		body     []node
	}

	breakNode    struct{}
	continueNode struct{}
)

// Expressions.
type (
	expr any

	literal struct{ val any }
	nameRef struct {
		line int
		name string
	}
	listExpr  struct{ items []expr }
	tupleExpr struct{ items []expr }
	dictExpr  struct{ keys, vals []expr }

	attrExpr struct {
		line int
		obj  expr
		name string
	}
	itemExpr struct {
		line       int
		obj, index expr
	}
	sliceExpr struct {
		line                   int
		obj, start, stop, step expr // nil when left out
	}
	callExpr struct {
		line   int
		fn     expr
		args   []expr
		kwargs []kwarg
	}
	kwarg struct {
		name string
		val  expr
	}
	filterExpr struct {
		line   int
		obj    expr // nil inside a filter block
		name   string
		args   []expr
		kwargs []kwarg
	}
	testExpr struct {
		line   int
		obj    expr
		name   string
		args   []expr
		negate bool
	}
	unaryExpr struct {
		line int
		op   string // "not", "-", "+"
		x    expr
	}
	binaryExpr struct {
		line int
		op   string // "and", "or", "+", "-", "*", "/", "//", "%", "**", "~"
		l, r expr
	}
	// compareExpr is a chain: first ops[0] rest[0] ops[1] rest[1] ...
	compareExpr struct {
		line  int
		first expr
		ops   []string // "==", "!=", "<", "<=", ">", ">=", "in", "not in"
		rest  []expr
	}
	condExpr struct {
		then, cond, orelse expr // orelse nil: Undefined
	}
)

// maxNesting bounds the parser's recursion on hostile input.
const maxNesting = 200

type parser struct {
	toks  []token
	pos   int
	depth int
}

func parse(src string) ([]node, error) {
	toks, err := lex(src)
	if err != nil {
		return nil, err
	}
	p := &parser{toks: toks}
	body, end, err := p.subparse()
	if err != nil {
		return nil, err
	}
	if end != "" {
		return nil, p.errorf(p.cur(), "unexpected '%s'", end)
	}
	return body, nil
}

func (p *parser) cur() token  { return p.toks[p.pos] }
func (p *parser) peek() token { return p.toks[min(p.pos+1, len(p.toks)-1)] }

func (p *parser) next() token {
	t := p.toks[p.pos]
	if p.pos < len(p.toks)-1 {
		p.pos++
	}
	return t
}

func (p *parser) errorf(t token, format string, args ...any) error {
	return &SyntaxError{Line: t.line, Msg: fmt.Sprintf(format, args...)}
}

func (p *parser) isOp(op string) bool {
	t := p.cur()
	return t.kind == tokOp && t.val == op
}

func (p *parser) isName(name string) bool {
	t := p.cur()
	return t.kind == tokName && t.val == name
}

func (p *parser) skipOp(op string) bool {
	if p.isOp(op) {
		p.next()
		return true
	}
	return false
}

func (p *parser) skipName(name string) bool {
	if p.isName(name) {
		p.next()
		return true
	}
	return false
}

func (p *parser) expectOp(op string) error {
	if !p.skipOp(op) {
		return p.errorf(p.cur(), "expected '%s', got %s", op, p.cur())
	}
	return nil
}

func (p *parser) expectName() (string, error) {
	t := p.cur()
	if t.kind != tokName {
		return "", p.errorf(t, "expected a name, got %s", t)
	}
	p.next()
	return t.val, nil
}

func (p *parser) expectBlockEnd() error {
	if p.cur().kind != tokBlockEnd {
		return p.errorf(p.cur(), "expected '%%}', got %s", p.cur())
	}
	p.next()
	return nil
}

// subparse parses statements up to the end of the template or to a block
// tag that ends or splits the enclosing block (endfor, else, ...), whose
// name it returns with the parser on the tag's name.
func (p *parser) subparse() ([]node, string, error) {
	var body []node
	for {
		t := p.cur()
		switch t.kind {
		case tokEOF:
			return body, "", nil
		case tokData:
			body = append(body, &textNode{text: t.val})
			p.next()
		case tokVarBegin:
			p.next()
			e, err := p.parseTuple(true, false)
			if err != nil {
				return nil, "", err
			}
			if p.cur().kind != tokVarEnd {
				return nil, "", p.errorf(p.cur(), "expected '}}', got %s", p.cur())
			}
			p.next()
			body = append(body, &outputNode{line: t.line, expr: e})
		case tokBlockBegin:
			p.next()
			nt := p.cur()
			if nt.kind != tokName {
				return nil, "", p.errorf(nt, "expected a tag name, got %s", nt)
			}
			switch nt.val {
			case "endif", "elif", "else", "endfor", "endset", "endmacro", "endfilter", "endgeneration":
				return body, nt.val, nil
			}
			n, err := p.statement()
			if err != nil {
				return nil, "", err
			}
			if n != nil {
				body = append(body, n)
			}
		default:
			return nil, "", p.errorf(t, "unexpected %s", t)
		}
	}
}

// parseBody parses a block body that must end with one of ends.
func (p *parser) parseBody(start token, ends ...string) ([]node, string, error) {
	body, end, err := p.subparse()
	if err != nil {
		return nil, "", err
	}
	for _, e := range ends {
		if end == e {
			p.next()
			return body, end, nil
		}
	}
	if end == "" {
		return nil, "", p.errorf(p.cur(), "unexpected end of template: '%s' at line %d is not closed (expected '%s')", start.val, start.line, ends[len(ends)-1])
	}
	return nil, "", p.errorf(p.cur(), "unexpected '%s' (expected '%s')", end, ends[len(ends)-1])
}

func (p *parser) statement() (node, error) {
	t := p.next()
	switch t.val {
	case "if":
		return p.parseIf(t)
	case "for":
		return p.parseFor(t)
	case "set":
		return p.parseSet(t)
	case "macro":
		return p.parseMacro(t)
	case "filter":
		return p.parseFilterBlock(t)
	case "break", "continue":
		if err := p.expectBlockEnd(); err != nil {
			return nil, err
		}
		if t.val == "break" {
			return &breakNode{}, nil
		}
		return &continueNode{}, nil
	case "generation":
		// transformers' AssistantTracker marks assistant text with
		// {% generation %}; it renders as its body.
		if err := p.expectBlockEnd(); err != nil {
			return nil, err
		}
		body, _, err := p.parseBody(t, "endgeneration")
		if err != nil {
			return nil, err
		}
		return &filterBlockNode{body: body}, p.expectBlockEnd()
	case "include", "import", "from", "extends", "block", "call", "with", "do", "autoescape", "trans":
		return nil, p.errorf(t, "the '%s' tag is not supported in chat templates", t.val)
	}
	return nil, p.errorf(t, "unknown tag '%s'", t.val)
}

func (p *parser) parseIf(start token) (node, error) {
	n := &ifNode{}
	for {
		cond, err := p.parseTuple(false, false)
		if err != nil {
			return nil, err
		}
		if err := p.expectBlockEnd(); err != nil {
			return nil, err
		}
		body, end, err := p.parseBody(start, "elif", "else", "endif")
		if err != nil {
			return nil, err
		}
		n.conds = append(n.conds, cond)
		n.bodies = append(n.bodies, body)
		switch end {
		case "elif":
			continue
		case "else":
			if err := p.expectBlockEnd(); err != nil {
				return nil, err
			}
			n.orelse, _, err = p.parseBody(start, "endif")
			if err != nil {
				return nil, err
			}
		}
		return n, p.expectBlockEnd()
	}
}

func (p *parser) parseFor(start token) (node, error) {
	n := &forNode{line: start.line}
	for {
		name, err := p.expectName()
		if err != nil {
			return nil, err
		}
		n.targets = append(n.targets, name)
		if !p.skipOp(",") {
			break
		}
	}
	if !p.skipName("in") {
		return nil, p.errorf(p.cur(), "expected 'in', got %s", p.cur())
	}
	iter, err := p.parseTuple(false, false)
	if err != nil {
		return nil, err
	}
	n.iter = iter
	if p.skipName("if") {
		if n.cond, err = p.parseExpr(true); err != nil {
			return nil, err
		}
	}
	if p.isName("recursive") {
		return nil, p.errorf(p.cur(), "recursive loops are not supported in chat templates")
	}
	if err := p.expectBlockEnd(); err != nil {
		return nil, err
	}
	body, end, err := p.parseBody(start, "else", "endfor")
	if err != nil {
		return nil, err
	}
	n.body = body
	if end == "else" {
		if err := p.expectBlockEnd(); err != nil {
			return nil, err
		}
		if n.orelse, _, err = p.parseBody(start, "endfor"); err != nil {
			return nil, err
		}
	}
	return n, p.expectBlockEnd()
}

func (p *parser) parseSet(start token) (node, error) {
	name, err := p.expectName()
	if err != nil {
		return nil, err
	}
	n := &setNode{line: start.line, targets: []string{name}}
	switch {
	case p.skipOp("."):
		if n.nsAttr, err = p.expectName(); err != nil {
			return nil, err
		}
	case p.isOp(","):
		for p.skipOp(",") {
			name, err := p.expectName()
			if err != nil {
				return nil, err
			}
			n.targets = append(n.targets, name)
		}
	}
	if p.skipOp("=") {
		if n.value, err = p.parseTuple(true, false); err != nil {
			return nil, err
		}
		return n, p.expectBlockEnd()
	}
	if len(n.targets) != 1 || n.nsAttr != "" {
		return nil, p.errorf(p.cur(), "expected '=', got %s", p.cur())
	}
	b := &setBlockNode{name: name}
	for p.skipOp("|") {
		f, err := p.parseFilter(nil)
		if err != nil {
			return nil, err
		}
		b.filters = append(b.filters, f)
	}
	if err := p.expectBlockEnd(); err != nil {
		return nil, err
	}
	if b.body, _, err = p.parseBody(start, "endset"); err != nil {
		return nil, err
	}
	return b, p.expectBlockEnd()
}

func (p *parser) parseMacro(start token) (node, error) {
	name, err := p.expectName()
	if err != nil {
		return nil, err
	}
	n := &macroNode{line: start.line, name: name}
	if err := p.expectOp("("); err != nil {
		return nil, err
	}
	for !p.skipOp(")") {
		if len(n.params) > 0 {
			if err := p.expectOp(","); err != nil {
				return nil, err
			}
			if p.skipOp(")") {
				break
			}
		}
		param, err := p.expectName()
		if err != nil {
			return nil, err
		}
		n.params = append(n.params, param)
		if p.skipOp("=") {
			d, err := p.parseExpr(true)
			if err != nil {
				return nil, err
			}
			n.defaults = append(n.defaults, d)
		} else if len(n.defaults) > 0 {
			return nil, p.errorf(p.cur(), "non-default argument '%s' follows default argument", param)
		}
	}
	if err := p.expectBlockEnd(); err != nil {
		return nil, err
	}
	if n.body, _, err = p.parseBody(start, "endmacro"); err != nil {
		return nil, err
	}
	return n, p.expectBlockEnd()
}

func (p *parser) parseFilterBlock(start token) (node, error) {
	n := &filterBlockNode{}
	for {
		f, err := p.parseFilter(nil)
		if err != nil {
			return nil, err
		}
		n.filters = append(n.filters, f)
		if !p.skipOp("|") {
			break
		}
	}
	if err := p.expectBlockEnd(); err != nil {
		return nil, err
	}
	var err error
	if n.body, _, err = p.parseBody(start, "endfilter"); err != nil {
		return nil, err
	}
	return n, p.expectBlockEnd()
}

// enter guards the parser's recursion depth.
func (p *parser) enter() error {
	p.depth++
	if p.depth > maxNesting {
		return p.errorf(p.cur(), "expression nested too deeply")
	}
	return nil
}

func (p *parser) leave() { p.depth-- }

// parseTuple parses an expression or a comma-separated tuple of them.
// inParens: the caller consumed "(" (so "()" is the empty tuple).
func (p *parser) parseTuple(withCond, inParens bool) (expr, error) {
	var items []expr
	comma := false
	for {
		if len(items) > 0 {
			if !p.skipOp(",") {
				break
			}
			comma = true
		}
		if p.tupleEnds() {
			break
		}
		e, err := p.parseExpr(withCond)
		if err != nil {
			return nil, err
		}
		items = append(items, e)
	}
	if !comma {
		if len(items) == 1 {
			return items[0], nil
		}
		if !inParens {
			return nil, p.errorf(p.cur(), "expected an expression, got %s", p.cur())
		}
	}
	return &tupleExpr{items: items}, nil
}

func (p *parser) tupleEnds() bool {
	t := p.cur()
	switch t.kind {
	case tokBlockEnd, tokVarEnd, tokEOF:
		return true
	case tokOp:
		return t.val == ")"
	case tokName:
		return t.val == "in" || t.val == "recursive" || t.val == "if"
	}
	return false
}

func (p *parser) parseExpr(withCond bool) (expr, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	defer p.leave()
	if !withCond {
		return p.parseOr()
	}
	e, err := p.parseOr()
	if err != nil {
		return nil, err
	}
	for p.skipName("if") {
		cond, err := p.parseOr()
		if err != nil {
			return nil, err
		}
		c := &condExpr{then: e, cond: cond}
		if p.skipName("else") {
			if c.orelse, err = p.parseExpr(true); err != nil {
				return nil, err
			}
		}
		e = c
	}
	return e, nil
}

func (p *parser) parseOr() (expr, error) {
	l, err := p.parseAnd()
	for err == nil && p.isName("or") {
		t := p.next()
		var r expr
		r, err = p.parseAnd()
		l = &binaryExpr{line: t.line, op: "or", l: l, r: r}
	}
	return l, err
}

func (p *parser) parseAnd() (expr, error) {
	l, err := p.parseNot()
	for err == nil && p.isName("and") {
		t := p.next()
		var r expr
		r, err = p.parseNot()
		l = &binaryExpr{line: t.line, op: "and", l: l, r: r}
	}
	return l, err
}

func (p *parser) parseNot() (expr, error) {
	if p.isName("not") {
		t := p.next()
		if err := p.enter(); err != nil {
			return nil, err
		}
		defer p.leave()
		x, err := p.parseNot()
		return &unaryExpr{line: t.line, op: "not", x: x}, err
	}
	return p.parseCompare()
}

func (p *parser) parseCompare() (expr, error) {
	first, err := p.parseMath1()
	if err != nil {
		return nil, err
	}
	c := &compareExpr{line: p.cur().line, first: first}
	for {
		t := p.cur()
		var op string
		switch {
		case t.kind == tokOp && (t.val == "==" || t.val == "!=" || t.val == "<" || t.val == "<=" || t.val == ">" || t.val == ">="):
			op = t.val
			p.next()
		case p.isName("in"):
			op = "in"
			p.next()
		case p.isName("not") && p.peek().kind == tokName && p.peek().val == "in":
			op = "not in"
			p.next()
			p.next()
		default:
			if len(c.ops) == 0 {
				return first, nil
			}
			return c, nil
		}
		r, err := p.parseMath1()
		if err != nil {
			return nil, err
		}
		c.ops = append(c.ops, op)
		c.rest = append(c.rest, r)
	}
}

// parseBinary parses a left-associative level of binary operators.
func (p *parser) parseBinary(ops []string, sub func() (expr, error)) (expr, error) {
	l, err := sub()
	if err != nil {
		return nil, err
	}
	for {
		t := p.cur()
		found := false
		for _, op := range ops {
			if t.kind == tokOp && t.val == op {
				found = true
				break
			}
		}
		if !found {
			return l, nil
		}
		p.next()
		r, err := sub()
		if err != nil {
			return nil, err
		}
		l = &binaryExpr{line: t.line, op: t.val, l: l, r: r}
	}
}

func (p *parser) parseMath1() (expr, error) {
	return p.parseBinary([]string{"+", "-"}, p.parseConcat)
}

func (p *parser) parseConcat() (expr, error) {
	return p.parseBinary([]string{"~"}, p.parseMath2)
}

func (p *parser) parseMath2() (expr, error) {
	return p.parseBinary([]string{"*", "/", "//", "%"}, p.parsePow)
}

func (p *parser) parsePow() (expr, error) {
	return p.parseBinary([]string{"**"}, func() (expr, error) { return p.parseUnary(true) })
}

func (p *parser) parseUnary(withFilter bool) (expr, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	defer p.leave()
	var e expr
	var err error
	if t := p.cur(); p.isOp("-") || p.isOp("+") {
		p.next()
		x, err := p.parseUnary(false)
		if err != nil {
			return nil, err
		}
		e = &unaryExpr{line: t.line, op: t.val, x: x}
	} else if e, err = p.parsePrimary(); err != nil {
		return nil, err
	}
	if e, err = p.parsePostfix(e); err != nil {
		return nil, err
	}
	if withFilter {
		return p.parseFilterExpr(e)
	}
	return e, nil
}

func (p *parser) parsePrimary() (expr, error) {
	t := p.cur()
	switch t.kind {
	case tokName:
		p.next()
		switch t.val {
		case "true", "True":
			return &literal{val: true}, nil
		case "false", "False":
			return &literal{val: false}, nil
		case "none", "None":
			return &literal{val: nil}, nil
		}
		return &nameRef{line: t.line, name: t.val}, nil
	case tokString:
		s := ""
		for p.cur().kind == tokString {
			s += p.next().val
		}
		return &literal{val: s}, nil
	case tokInt:
		p.next()
		v, err := strconv.ParseInt(t.val, 10, 64)
		if err != nil {
			return nil, p.errorf(t, "integer literal %s out of range", t.val)
		}
		return &literal{val: v}, nil
	case tokFloat:
		p.next()
		v, err := strconv.ParseFloat(t.val, 64)
		if err != nil {
			return nil, p.errorf(t, "bad float literal %s", t.val)
		}
		return &literal{val: v}, nil
	case tokOp:
		switch t.val {
		case "(":
			p.next()
			e, err := p.parseTuple(true, true)
			if err != nil {
				return nil, err
			}
			return e, p.expectOp(")")
		case "[":
			p.next()
			l := &listExpr{}
			for !p.skipOp("]") {
				if len(l.items) > 0 {
					if err := p.expectOp(","); err != nil {
						return nil, err
					}
					if p.skipOp("]") {
						break
					}
				}
				e, err := p.parseExpr(true)
				if err != nil {
					return nil, err
				}
				l.items = append(l.items, e)
			}
			return l, nil
		case "{":
			p.next()
			d := &dictExpr{}
			for !p.skipOp("}") {
				if len(d.keys) > 0 {
					if err := p.expectOp(","); err != nil {
						return nil, err
					}
					if p.skipOp("}") {
						break
					}
				}
				k, err := p.parseExpr(true)
				if err != nil {
					return nil, err
				}
				if err := p.expectOp(":"); err != nil {
					return nil, err
				}
				v, err := p.parseExpr(true)
				if err != nil {
					return nil, err
				}
				d.keys = append(d.keys, k)
				d.vals = append(d.vals, v)
			}
			return d, nil
		}
	}
	return nil, p.errorf(t, "unexpected %s", t)
}

func (p *parser) parsePostfix(e expr) (expr, error) {
	for {
		t := p.cur()
		switch {
		case p.isOp("."):
			p.next()
			a := p.next()
			switch a.kind {
			case tokName:
				e = &attrExpr{line: t.line, obj: e, name: a.val}
			case tokInt:
				v, err := strconv.ParseInt(a.val, 10, 64)
				if err != nil {
					return nil, p.errorf(a, "integer literal %s out of range", a.val)
				}
				e = &itemExpr{line: t.line, obj: e, index: &literal{val: v}}
			default:
				return nil, p.errorf(a, "expected an attribute name after '.', got %s", a)
			}
		case p.isOp("["):
			p.next()
			var err error
			if e, err = p.parseSubscript(t, e); err != nil {
				return nil, err
			}
		case p.isOp("("):
			var err error
			if e, err = p.parseCall(e); err != nil {
				return nil, err
			}
		default:
			return e, nil
		}
	}
}

func (p *parser) parseSubscript(t token, obj expr) (expr, error) {
	var parts [3]expr
	n := 0
	for {
		if !p.isOp(":") && !p.isOp("]") {
			e, err := p.parseExpr(true)
			if err != nil {
				return nil, err
			}
			parts[n] = e
		}
		if p.skipOp("]") {
			break
		}
		if n == 2 || !p.skipOp(":") {
			return nil, p.errorf(p.cur(), "expected ']', got %s", p.cur())
		}
		n++
	}
	if n == 0 {
		if parts[0] == nil {
			return nil, p.errorf(t, "expected an index")
		}
		return &itemExpr{line: t.line, obj: obj, index: parts[0]}, nil
	}
	return &sliceExpr{line: t.line, obj: obj, start: parts[0], stop: parts[1], step: parts[2]}, nil
}

// parseArgs parses "(" args ")" into positional and keyword arguments.
func (p *parser) parseArgs() ([]expr, []kwarg, error) {
	if err := p.expectOp("("); err != nil {
		return nil, nil, err
	}
	var args []expr
	var kwargs []kwarg
	for !p.skipOp(")") {
		if len(args)+len(kwargs) > 0 {
			if err := p.expectOp(","); err != nil {
				return nil, nil, err
			}
			if p.skipOp(")") {
				break
			}
		}
		if p.isOp("*") || p.isOp("**") {
			return nil, nil, p.errorf(p.cur(), "*args and **kwargs are not supported in chat templates")
		}
		if t := p.cur(); t.kind == tokName && p.peek().kind == tokOp && p.peek().val == "=" {
			p.next()
			p.next()
			v, err := p.parseExpr(true)
			if err != nil {
				return nil, nil, err
			}
			kwargs = append(kwargs, kwarg{name: t.val, val: v})
			continue
		}
		if len(kwargs) > 0 {
			return nil, nil, p.errorf(p.cur(), "positional argument follows keyword argument")
		}
		v, err := p.parseExpr(true)
		if err != nil {
			return nil, nil, err
		}
		args = append(args, v)
	}
	return args, kwargs, nil
}

func (p *parser) parseCall(fn expr) (expr, error) {
	t := p.cur()
	args, kwargs, err := p.parseArgs()
	if err != nil {
		return nil, err
	}
	return &callExpr{line: t.line, fn: fn, args: args, kwargs: kwargs}, nil
}

func (p *parser) parseFilterExpr(e expr) (expr, error) {
	for {
		switch {
		case p.isOp("|"):
			p.next()
			f, err := p.parseFilter(e)
			if err != nil {
				return nil, err
			}
			e = f
		case p.isName("is"):
			t := p.next()
			var err error
			if e, err = p.parseTest(t, e); err != nil {
				return nil, err
			}
		case p.isOp("("):
			var err error
			if e, err = p.parseCall(e); err != nil {
				return nil, err
			}
		default:
			return e, nil
		}
	}
}

func (p *parser) parseFilter(obj expr) (*filterExpr, error) {
	t := p.cur()
	name, err := p.expectName()
	if err != nil {
		return nil, err
	}
	for p.skipOp(".") {
		part, err := p.expectName()
		if err != nil {
			return nil, err
		}
		name += "." + part
	}
	if _, ok := filters[name]; !ok {
		return nil, p.errorf(t, "no filter named '%s'", name)
	}
	f := &filterExpr{line: t.line, obj: obj, name: name}
	if p.isOp("(") {
		if f.args, f.kwargs, err = p.parseArgs(); err != nil {
			return nil, err
		}
	}
	return f, nil
}

func (p *parser) parseTest(is token, obj expr) (expr, error) {
	negate := p.skipName("not")
	t := p.cur()
	name, err := p.expectName()
	if err != nil {
		return nil, err
	}
	if _, ok := tests[name]; !ok {
		return nil, p.errorf(t, "no test named '%s'", name)
	}
	n := &testExpr{line: is.line, obj: obj, name: name, negate: negate}
	c := p.cur()
	switch {
	case p.isOp("("):
		args, kwargs, err := p.parseArgs()
		if err != nil {
			return nil, err
		}
		if len(kwargs) > 0 {
			return nil, p.errorf(c, "tests take no keyword arguments")
		}
		n.args = args
	case c.kind == tokName && c.val != "else" && c.val != "or" && c.val != "and",
		c.kind == tokString, c.kind == tokInt, c.kind == tokFloat,
		c.kind == tokOp && (c.val == "[" || c.val == "{"):
		if c.kind == tokName && c.val == "is" {
			return nil, p.errorf(c, "you cannot chain multiple tests with is")
		}
		arg, err := p.parsePrimary()
		if err != nil {
			return nil, err
		}
		if arg, err = p.parsePostfix(arg); err != nil {
			return nil, err
		}
		n.args = []expr{arg}
	}
	return n, nil
}
