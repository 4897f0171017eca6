package structured

import (
	"fmt"
	"slices"
)

// Tool is a function a generation may call: its name and the JSON Schema
// of its arguments (nil: none, so the empty object, as OpenAI reads a
// function without parameters).
type Tool struct {
	Name       string
	Parameters []byte
}

// ToolArguments is the format of one call's arguments (OpenAI's
// tool_choice naming a function): a JSON object its parameters schema
// allows.
func ToolArguments(t Tool) (*Format, error) {
	n, err := toolParameters(t)
	if err != nil {
		return nil, err
	}
	return &Format{root: n}, nil
}

// ToolCalls is the format of tool_choice "required", as vLLM writes it: a
// JSON array of calls [{"name": N, "parameters": {...}}, ...], each name
// one of tools' and each parameters object what that tool's schema
// allows, at least one call and at most maxCalls (0: no bound).
func ToolCalls(tools []Tool, maxCalls int) (*Format, error) {
	union, err := callObject(tools, `"parameters"`)
	if err != nil {
		return nil, err
	}
	root := &node{items: union, minItems: 1, maxItems: -1, maxLen: -1}
	if maxCalls > 0 {
		root.maxItems = maxCalls
	}
	root.byKind[kArray] = root
	return &Format{root: root}, nil
}

// TaggedToolCalls is the format of free text whose calls, each between
// open and close (Hermes' <tool_call> and </tool_call>), are objects
// {"name": N, "arguments": {...}} of the tools, whitespace around the
// object allowed: tool_choice "auto" with every call well-formed. The
// text is free until open appears, and may end only outside a call.
func TaggedToolCalls(open, close string, tools []Tool) (*Format, error) {
	if open == "" || close == "" {
		return nil, fmt.Errorf("tools: the tags must not be empty")
	}
	union, err := callObject(tools, `"arguments"`)
	if err != nil {
		return nil, err
	}
	return &Format{root: union, tag: newTag(open, close)}, nil
}

// TaggedToolCallsOnly is TaggedToolCalls for tool_choice "required" in
// the model's own syntax: nothing but calls, whitespace between them, at
// least one and at most maxCalls (0: no bound).
func TaggedToolCallsOnly(open, close string, tools []Tool, maxCalls int) (*Format, error) {
	f, err := TaggedToolCalls(open, close, tools)
	if err != nil {
		return nil, err
	}
	f.tag.only, f.tag.maxSpans = true, maxCalls
	return f, nil
}

// callObject is the node of one call, {"name": N, "arguments" or
// "parameters" (argsKey, JSON text): {...}}, whose node becomes the
// named tool's once the name is read (node.variants), so the byte
// machine stays deterministic however many tools share its shape.
func callObject(tools []Tool, argsKey string) (*node, error) {
	if len(tools) == 0 {
		return nil, fmt.Errorf("tools: none given")
	}
	union := &node{maxItems: -1, maxLen: -1, variants: map[string]*node{}}
	union.byKind[kObject] = union
	names := &node{maxItems: -1, maxLen: -1}
	for _, t := range tools {
		params, err := toolParameters(t)
		if err != nil {
			return nil, err
		}
		name := jsonString(t.Name)
		if union.variants[name] != nil {
			return nil, fmt.Errorf("tools: %q is named twice", t.Name)
		}
		names.lits = append(names.lits, name)
		v := &node{maxItems: -1, maxLen: -1, props: []property{
			{key: `"name"`, value: &node{lits: []string{name}}, required: true},
			{key: argsKey, value: params, required: true},
		}}
		v.byKind[kObject] = v
		union.variants[name] = v
	}
	slices.Sort(names.lits)
	union.props = []property{{key: `"name"`, value: names, required: true}, {key: argsKey, value: anyObject, required: true}}
	return union, nil
}

// toolParameters compiles a tool's parameters schema.
func toolParameters(t Tool) (*node, error) {
	if t.Name == "" {
		return nil, fmt.Errorf("tools: a function needs a name")
	}
	schema := t.Parameters
	if len(schema) == 0 {
		schema = []byte(`{"type": "object", "properties": {}}`)
	}
	n, err := compileSchema(schema)
	if err != nil {
		return nil, fmt.Errorf("tools: function %q parameters: %w", t.Name, err)
	}
	return n, nil
}
