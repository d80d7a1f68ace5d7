package cloudformation

// A structural validator for CloudFormation templates, used by the tests.
//
// It reads the template with goformation's YAML loader (which turns the
// short forms !Ref, !Sub, !If... into their long forms and nothing else:
// NoProcess) and checks it against the CloudFormation JSON schema that
// goformation v7.14.9 generates from the CloudFormation resource
// specification (package schema, CloudformationSchema). The schema types
// every property as a literal; an intrinsic function ({"Ref": ...},
// {"Fn::If": [...]}) is accepted wherever a value goes, and checked on its
// own: what it names must exist, and a conditional resource may only be
// named under its condition.

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/awslabs/goformation/v7/intrinsics"
	"github.com/awslabs/goformation/v7/schema"
)

type schemaNode struct {
	Ref                  string                 `json:"$ref"`
	Type                 any                    `json:"type"`
	Properties           map[string]*schemaNode `json:"properties"`
	PatternProperties    map[string]*schemaNode `json:"patternProperties"`
	AdditionalProperties any                    `json:"additionalProperties"`
	Required             []string               `json:"required"`
	Items                *schemaNode            `json:"items"`
	Enum                 []any                  `json:"enum"`
	AnyOf                []*schemaNode          `json:"anyOf"`
}

type cfnSchema struct {
	schemaNode
	Definitions map[string]*schemaNode `json:"definitions"`
}

func loadSchema() (*cfnSchema, error) {
	var s cfnSchema
	if err := json.Unmarshal([]byte(schema.CloudformationSchema), &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// loadTemplate parses YAML with CloudFormation's short-form tags into
// generic JSON values, resolving no intrinsic function.
func loadTemplate(yaml []byte) (map[string]any, error) {
	js, err := intrinsics.ProcessYAML(yaml, &intrinsics.ProcessorOptions{NoProcess: true})
	if err != nil {
		return nil, err
	}
	var t map[string]any
	if err := json.Unmarshal(js, &t); err != nil {
		return nil, err
	}
	return t, nil
}

// pseudoParameters are the AWS:: names Ref accepts besides the template's
// own parameters and resources.
var pseudoParameters = []string{
	"AWS::AccountId", "AWS::NotificationARNs", "AWS::NoValue", "AWS::Partition",
	"AWS::Region", "AWS::StackId", "AWS::StackName", "AWS::URLSuffix",
}

// knownAttributes lists, per resource type, the Fn::GetAtt attributes this
// template may use. The schema has no attributes; these come from the
// "Return values" section of each type's page in the CloudFormation User
// Guide. A new GetAtt fails the test until its attribute is checked there
// and added.
var knownAttributes = map[string][]string{
	"AWS::ElasticLoadBalancingV2::LoadBalancer": {"CanonicalHostedZoneID", "DNSName", "LoadBalancerArn", "LoadBalancerFullName", "LoadBalancerName", "SecurityGroups"},
	"AWS::IAM::Role":              {"Arn", "RoleId"},
	"AWS::ECS::Service":           {"Name", "ServiceArn"},
	"AWS::ECS::Cluster":           {"Arn"},
	"AWS::Logs::LogGroup":         {"Arn"},
	"AWS::SecretsManager::Secret": {"Id"},
}

// resourceKeys are the attributes a resource entry may have besides Type
// and Properties (CloudFormation User Guide, "Resource attribute reference").
var resourceKeys = []string{"Type", "Properties", "Condition", "DependsOn", "Metadata", "DeletionPolicy", "UpdateReplacePolicy", "CreationPolicy", "UpdatePolicy"}

type validator struct {
	s          *cfnSchema
	t          map[string]any
	params     map[string]any
	resources  map[string]map[string]any
	conditions map[string]any
	errs       []string
	usedParams map[string]bool
	usedConds  map[string]bool
}

// validate returns every problem found, sorted; none means the template is
// structurally valid as far as these checks go.
func validate(s *cfnSchema, t map[string]any) []string {
	v := &validator{s: s, t: t, usedParams: map[string]bool{}, usedConds: map[string]bool{}}
	v.params, _ = t["Parameters"].(map[string]any)
	v.conditions, _ = t["Conditions"].(map[string]any)
	v.resources = map[string]map[string]any{}
	if rs, ok := t["Resources"].(map[string]any); ok {
		for name, r := range rs {
			if m, ok := r.(map[string]any); ok {
				v.resources[name] = m
			} else {
				v.errf("Resources.%s: not an object", name)
			}
		}
	}
	if len(v.resources) == 0 {
		v.errf("Resources: none")
	}

	for key := range t {
		if _, ok := s.Properties[key]; !ok {
			v.errf("top level: unknown section %q", key)
		}
	}
	if f, _ := t["AWSTemplateFormatVersion"].(string); f != "2010-09-09" {
		v.errf("AWSTemplateFormatVersion is %q", f)
	}
	for name, p := range v.params {
		v.checkName("Parameters", name)
		v.value("Parameters."+name, p, s.Definitions["Parameter"], nil)
	}
	for name, c := range v.conditions {
		v.checkName("Conditions", name)
		v.condition("Conditions."+name, c)
	}
	for name, r := range v.resources {
		v.checkName("Resources", name)
		v.resource(name, r)
	}
	outputs, _ := t["Outputs"].(map[string]any)
	for name, o := range outputs {
		v.checkName("Outputs", name)
		om, ok := o.(map[string]any)
		if !ok {
			v.errf("Outputs.%s: not an object", name)
			continue
		}
		for k := range om {
			if !slices.Contains([]string{"Description", "Value", "Export", "Condition"}, k) {
				v.errf("Outputs.%s: unknown key %q", name, k)
			}
		}
		if _, ok := om["Value"]; !ok {
			v.errf("Outputs.%s: no Value", name)
		}
		var active []string
		if c, ok := om["Condition"].(string); ok {
			v.useCondition("Outputs."+name, c)
			active = []string{c}
		}
		v.intrinsics("Outputs."+name+".Value", om["Value"], active)
		v.intrinsics("Outputs."+name+".Description", om["Description"], active)
	}
	for name := range v.params {
		if !v.usedParams[name] {
			v.errf("Parameters.%s: never used", name)
		}
	}
	for name := range v.conditions {
		if !v.usedConds[name] {
			v.errf("Conditions.%s: never used", name)
		}
	}
	sort.Strings(v.errs)
	return v.errs
}

func (v *validator) errf(format string, args ...any) {
	v.errs = append(v.errs, fmt.Sprintf(format, args...))
}

var logicalID = regexp.MustCompile(`^[A-Za-z0-9]+$`)

func (v *validator) checkName(section, name string) {
	if !logicalID.MatchString(name) {
		v.errf("%s.%s: names must be alphanumeric", section, name)
	}
}

func (v *validator) resource(name string, r map[string]any) {
	path := "Resources." + name
	typ, _ := r["Type"].(string)
	def, ok := v.s.Definitions[typ]
	if !ok || strings.Contains(typ, ".") {
		v.errf("%s: unknown resource type %q", path, typ)
		return
	}
	for k := range r {
		if !slices.Contains(resourceKeys, k) {
			v.errf("%s: unknown resource attribute %q", path, k)
		}
	}
	var active []string
	if c, ok := r["Condition"]; ok {
		cs, _ := c.(string)
		v.useCondition(path+".Condition", cs)
		active = []string{cs}
	}
	switch d := r["DependsOn"].(type) {
	case nil:
	case string:
		v.dependsOn(path, d, active)
	case []any:
		for _, x := range d {
			s, _ := x.(string)
			v.dependsOn(path, s, active)
		}
	default:
		v.errf("%s.DependsOn: not a name or a list of names", path)
	}
	propsNode := def.Properties["Properties"]
	props, has := r["Properties"]
	if !has {
		if propsNode != nil && len(v.resolve(propsNode).Required) > 0 {
			v.errf("%s: no Properties, but %v are required", path, v.resolve(propsNode).Required)
		}
		return
	}
	if propsNode == nil {
		v.errf("%s: type %s takes no Properties", path, typ)
		return
	}
	v.value(path+".Properties", props, propsNode, active)
}

func (v *validator) dependsOn(path, target string, active []string) {
	r, ok := v.resources[target]
	if !ok {
		v.errf("%s.DependsOn: no resource %q", path, target)
		return
	}
	if c, ok := r["Condition"].(string); ok && !slices.Contains(active, c) {
		v.errf("%s.DependsOn: %s exists only if %s, which does not hold here", path, target, c)
	}
}

func (v *validator) resolve(n *schemaNode) *schemaNode {
	for n != nil && n.Ref != "" {
		n = v.s.Definitions[strings.TrimPrefix(n.Ref, "#/definitions/")]
	}
	return n
}

// intrinsicName returns the function name if x is an intrinsic function
// call: an object with exactly one key, Ref or Fn::*.
func intrinsicName(x any) (string, any, bool) {
	m, ok := x.(map[string]any)
	if !ok || len(m) != 1 {
		return "", nil, false
	}
	for k, arg := range m {
		if k == "Ref" || strings.HasPrefix(k, "Fn::") {
			return k, arg, true
		}
	}
	return "", nil, false
}

// value checks x against schema node n. active lists the conditions known
// to hold at this point (the resource's, and those of enclosing Fn::If
// branches).
func (v *validator) value(path string, x any, n *schemaNode, active []string) {
	n = v.resolve(n)
	if n == nil {
		v.errf("%s: no schema", path)
		return
	}
	if _, _, ok := intrinsicName(x); ok {
		v.intrinsics(path, x, active)
		return
	}
	if len(n.AnyOf) > 0 {
		for _, alt := range n.AnyOf {
			sub := &validator{s: v.s, t: v.t, params: v.params, resources: v.resources, conditions: v.conditions, usedParams: v.usedParams, usedConds: v.usedConds}
			sub.value(path, x, alt, active)
			if len(sub.errs) == 0 {
				return
			}
		}
		v.errf("%s: matches none of the allowed forms", path)
		return
	}
	switch typ := n.Type.(type) {
	case string:
		v.typed(path, x, typ, n, active)
	case []any:
		// Several types allowed ("string" or "boolean"): any scalar.
		switch x.(type) {
		case map[string]any, []any:
			v.errf("%s: want one of %v, got %T", path, typ, x)
		}
	case nil:
		if n.Properties != nil {
			v.typed(path, x, "object", n, active)
		}
	}
	if len(n.Enum) > 0 {
		ok := false
		for _, e := range n.Enum {
			if fmt.Sprint(e) == fmt.Sprint(x) {
				ok = true
			}
		}
		if !ok {
			v.errf("%s: %v is not one of %v", path, x, n.Enum)
		}
	}
}

func (v *validator) typed(path string, x any, typ string, n *schemaNode, active []string) {
	switch typ {
	case "object":
		m, ok := x.(map[string]any)
		if !ok {
			v.errf("%s: want an object, got %T", path, x)
			return
		}
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if p, ok := n.Properties[k]; ok {
				v.value(path+"."+k, m[k], p, active)
				continue
			}
			matched := false
			for pat, p := range n.PatternProperties {
				if regexp.MustCompile(pat).MatchString(k) {
					v.value(path+"."+k, m[k], p, active)
					matched = true
					break
				}
			}
			if matched {
				continue
			}
			if ap, ok := n.AdditionalProperties.(bool); ok && !ap {
				v.errf("%s: unknown property %q", path, k)
				continue
			}
			// A free-form map (log driver options, policy documents): its
			// keys are not in the schema, but the intrinsics inside must
			// still resolve.
			v.intrinsics(path+"."+k, m[k], active)
		}
		for _, req := range n.Required {
			if _, ok := m[req]; !ok {
				v.errf("%s: required property %q is missing", path, req)
			}
		}
	case "array":
		a, ok := x.([]any)
		if !ok {
			v.errf("%s: want a list, got %T", path, x)
			return
		}
		for i, item := range a {
			if n.Items != nil {
				v.value(fmt.Sprintf("%s[%d]", path, i), item, n.Items, active)
			}
		}
	case "string":
		// CloudFormation turns numbers and booleans into strings.
		switch x.(type) {
		case string, float64, bool:
		default:
			v.errf("%s: want a string, got %T", path, x)
		}
	case "number", "integer":
		switch y := x.(type) {
		case float64:
		case string:
			if _, err := strconv.ParseFloat(y, 64); err != nil {
				v.errf("%s: want a number, got %q", path, y)
			}
		default:
			v.errf("%s: want a number, got %T", path, x)
		}
	case "boolean":
		switch y := x.(type) {
		case bool:
		case string:
			if y != "true" && y != "false" {
				v.errf("%s: want a boolean, got %q", path, y)
			}
		default:
			v.errf("%s: want a boolean, got %T", path, x)
		}
	default:
		v.errf("%s: schema type %q not handled by this validator", path, typ)
	}
}

// intrinsics walks any value and checks every intrinsic function in it.
func (v *validator) intrinsics(path string, x any, active []string) {
	name, arg, ok := intrinsicName(x)
	if !ok {
		switch y := x.(type) {
		case map[string]any:
			for k, e := range y {
				v.intrinsics(path+"."+k, e, active)
			}
		case []any:
			for i, e := range y {
				v.intrinsics(fmt.Sprintf("%s[%d]", path, i), e, active)
			}
		}
		return
	}
	at := path + "." + name
	switch name {
	case "Ref":
		s, ok := arg.(string)
		if !ok {
			v.errf("%s: want a name", at)
			return
		}
		v.ref(at, s, active)
	case "Fn::GetAtt":
		var res, attr string
		switch a := arg.(type) {
		case string:
			res, attr, _ = strings.Cut(a, ".")
		case []any:
			if len(a) == 2 {
				res, _ = a[0].(string)
				attr, _ = a[1].(string)
			}
		}
		v.getAtt(at, res, attr, active)
	case "Fn::Sub":
		var s string
		vars := map[string]bool{}
		switch a := arg.(type) {
		case string:
			s = a
		case []any:
			if len(a) != 2 {
				v.errf("%s: want [string, {vars}]", at)
				return
			}
			s, _ = a[0].(string)
			m, _ := a[1].(map[string]any)
			for k, e := range m {
				vars[k] = true
				v.intrinsics(at+"."+k, e, active)
			}
		}
		for _, m := range subVar.FindAllStringSubmatch(s, -1) {
			ref := m[1]
			if strings.HasPrefix(ref, "!") || vars[ref] {
				continue
			}
			if res, attr, ok := strings.Cut(ref, "."); ok {
				v.getAtt(at, res, attr, active)
			} else {
				v.ref(at, ref, active)
			}
		}
	case "Fn::If":
		a, ok := arg.([]any)
		if !ok || len(a) != 3 {
			v.errf("%s: want [condition, then, else]", at)
			return
		}
		c, _ := a[0].(string)
		v.useCondition(at, c)
		v.intrinsics(at+"[then]", a[1], append(slices.Clone(active), c))
		v.intrinsics(at+"[else]", a[2], active)
	case "Fn::Join":
		a, ok := arg.([]any)
		if !ok || len(a) != 2 {
			v.errf("%s: want [delimiter, list]", at)
			return
		}
		v.intrinsics(at, a[1], active)
	case "Fn::Select", "Fn::GetAZs", "Fn::Split", "Fn::Base64", "Fn::Cidr", "Fn::FindInMap", "Fn::ImportValue":
		v.intrinsics(at, arg, active)
	case "Fn::Equals", "Fn::Not", "Fn::And", "Fn::Or":
		v.errf("%s: condition functions belong in Conditions or Fn::If", at)
	default:
		v.errf("%s: unknown intrinsic function", at)
	}
}

var subVar = regexp.MustCompile(`\$\{([^}]+)\}`)

func (v *validator) ref(at, name string, active []string) {
	if slices.Contains(pseudoParameters, name) {
		return
	}
	if _, ok := v.params[name]; ok {
		v.usedParams[name] = true
		return
	}
	r, ok := v.resources[name]
	if !ok {
		v.errf("%s: %q is no parameter, resource or pseudo parameter", at, name)
		return
	}
	if c, ok := r["Condition"].(string); ok && !slices.Contains(active, c) {
		v.errf("%s: %s exists only if %s, which does not hold here", at, name, c)
	}
}

func (v *validator) getAtt(at, res, attr string, active []string) {
	r, ok := v.resources[res]
	if !ok {
		v.errf("%s: no resource %q", at, res)
		return
	}
	typ, _ := r["Type"].(string)
	if !slices.Contains(knownAttributes[typ], attr) {
		v.errf("%s: attribute %s.%s of %s is not in knownAttributes", at, res, attr, typ)
	}
	if c, ok := r["Condition"].(string); ok && !slices.Contains(active, c) {
		v.errf("%s: %s exists only if %s, which does not hold here", at, res, c)
	}
}

func (v *validator) useCondition(at, name string) {
	if _, ok := v.conditions[name]; !ok {
		v.errf("%s: no condition %q", at, name)
		return
	}
	v.usedConds[name] = true
}

// condition checks a condition expression: condition functions, Ref to a
// parameter, {"Condition": name}, and value functions inside Fn::Equals.
func (v *validator) condition(path string, x any) {
	m, ok := x.(map[string]any)
	if !ok || len(m) != 1 {
		v.errf("%s: want one condition function", path)
		return
	}
	for k, arg := range m {
		at := path + "." + k
		switch k {
		case "Condition":
			s, _ := arg.(string)
			v.useCondition(at, s)
		case "Fn::Equals":
			a, ok := arg.([]any)
			if !ok || len(a) != 2 {
				v.errf("%s: want two values", at)
				return
			}
			for _, e := range a {
				v.intrinsics(at, e, nil)
			}
		case "Fn::Not", "Fn::And", "Fn::Or":
			a, ok := arg.([]any)
			if !ok || len(a) == 0 || (k == "Fn::Not" && len(a) != 1) || (k != "Fn::Not" && (len(a) < 2 || len(a) > 10)) {
				v.errf("%s: wrong number of conditions", at)
				return
			}
			for i, e := range a {
				v.condition(fmt.Sprintf("%s[%d]", at, i), e)
			}
		default:
			v.errf("%s: not a condition function", at)
		}
	}
}
