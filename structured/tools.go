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
// allows, at least one call and at most maxCalls (0: no bound). The name
// comes first, and once it is read the object's node becomes that tool's
// (node.variants), so the byte machine stays deterministic however many
// tools share the object's shape.
func ToolCalls(tools []Tool, maxCalls int) (*Format, error) {
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
			{key: `"parameters"`, value: params, required: true},
		}}
		v.byKind[kObject] = v
		union.variants[name] = v
	}
	slices.Sort(names.lits)
	union.props = []property{{key: `"name"`, value: names, required: true}, {key: `"parameters"`, value: anyObject, required: true}}
	root := &node{items: union, minItems: 1, maxItems: -1, maxLen: -1}
	if maxCalls > 0 {
		root.maxItems = maxCalls
	}
	root.byKind[kArray] = root
	return &Format{root: root}, nil
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
