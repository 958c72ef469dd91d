package main

// couchbase: the Couchbase service broker's configuration templates, evaluated as that broker does.
//
// A configuration template is an object (`name`, `template`, `singleton`) whose `template` is any JSON
// object; every string in it that starts with "{{" is a *dynamic attribute*: one Go text/template, which
// must also end with "}}". Each of its actions is piped through `json`, the output is decoded as JSON, and the
// decoded value (a string, number, object, list or null) replaces the string. A null in an object removes
// the attribute. Strings that do not start with "{{" stay as they are. Couchbase's function map, and only it:
//
//   registry KEY              the registry value, or null when the key is absent
//   parameter PATH            a request parameter: a JSON pointer ("/a/b"), or a plain top-level name
//                             ("my-namespace"); null when absent
//   snippet NAME              another configuration template (the plan's snippets), rendered the same way
//   list ARGS...              a list of the arguments
//   generatePassword LEN DICT a random password (DICT nil: letters and digits)
//   generatePrivateKey TYPE ENCODING BITS   a PEM private key (RSA, EllipticP224..P521, ED25519; PKCS#1,
//                             PKCS#8, SEC 1)
//   generateCertificate KEY CN LIFETIME USAGE SANS CAKEY CACERT  a PEM certificate (USAGE CA, Server or
//                             Client; SANS "DNS:name" or "EMAIL:addr"; CAKEY/CACERT nil: self-signed)
//   required VALUE            VALUE, or an error when it is null
//   default DEFAULT VALUE     VALUE, or DEFAULT when VALUE is null
//   json VALUE                VALUE as JSON text
//
// Generated values are remembered: the n-th generator call of an attribute is kept under a registry key
// derived from the template's name, the attribute's JSON pointer and n (generatedKey). When that key is in
// the registry the stored value is returned instead, so a re-render never rotates a password or a key. The
// Python side persists the keys this render added (the response's "registry").
//
// Bounds: every attribute's output draws on the render's one output budget (gotemplate.go), `json` and
// `list` are guarded like their sprig namesakes (bounds.go), passwords and keys have maximum sizes, snippets
// nest at most maxSnippetDepth deep, and the watchdog in main.go bounds the wall time.

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"text/template"
	"text/template/parse"
	"time"
)

const (
	// maxSnippetDepth bounds snippet nesting (a snippet that names itself would otherwise recurse forever).
	maxSnippetDepth = 16
	// maxPasswordLength bounds generatePassword.
	maxPasswordLength = 4096
	// maxRSABits bounds generatePrivateKey's RSA size: an 8192-bit key takes seconds to make.
	maxRSABits = 4096
	// maxLifetime bounds a certificate's lifetime (100 years).
	maxLifetime = 100 * 365 * 24 * time.Hour
	// generatedPrefix starts every registry key that holds a generated value.
	generatedPrefix = "generated."
)

// couchbaseRequest is what the Python side sends as the values of an engine "couchbase" render.
type couchbaseRequest struct {
	// Registry is the readable registry (no reserved keys): what `registry` reads, and the generated values.
	Registry map[string]any `json:"registry"`
	// Parameters are the request's parameters (`parameter`).
	Parameters any `json:"parameters"`
	// RegistryEntries are the configuration binding's `registry` list: each value is evaluated in order and
	// stored under its name before any template renders (later entries and the templates can read it).
	RegistryEntries []registryEntry `json:"registryEntries"`
	// Templates are the configuration templates to render, in order.
	Templates []configurationTemplate `json:"templates"`
	// Snippets are the configuration templates `snippet` may name.
	Snippets map[string]configurationTemplate `json:"snippets"`
}

type registryEntry struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

type configurationTemplate struct {
	Name      string `json:"name"`
	Template  any    `json:"template"`
	Singleton bool   `json:"singleton,omitempty"`
}

// couchbaseResult is the render's output (as JSON text).
type couchbaseResult struct {
	// Registry holds the keys this render set: the registry entries and the newly generated values.
	Registry map[string]any          `json:"registry"`
	Objects  []configurationTemplate `json:"objects"`
}

// couchbaseRender is the state of one render.
type couchbaseRender struct {
	req     couchbaseRequest
	limits  Limits
	budget  *outputBudget
	written map[string]any
	// where names the attribute being evaluated (for generated keys), calls counts its generator calls.
	where string
	calls int
	depth int
}

// RenderCouchbase renders the request's registry entries and configuration templates.
func RenderCouchbase(req *Request) (string, error) {
	var in couchbaseRequest
	raw, err := json.Marshal(req.Values)
	if err != nil {
		return "", &RenderError{Kind: "values", Message: err.Error()}
	}
	if err := json.Unmarshal(raw, &in); err != nil {
		return "", &RenderError{Kind: "values", Message: fmt.Sprintf("not a couchbase render request: %v", err)}
	}
	if in.Registry == nil {
		in.Registry = map[string]any{}
	}
	r := &couchbaseRender{req: in, limits: req.Limits, budget: newOutputBudget(req.Limits), written: map[string]any{}}
	for _, entry := range in.RegistryEntries {
		if entry.Name == "" {
			return "", &RenderError{Kind: "values", Message: "a registry entry needs a name"}
		}
		value, err := r.attribute(entry.Value, "registry."+entry.Name)
		if err != nil {
			return "", fmt.Errorf("registry entry %q: %w", entry.Name, err)
		}
		r.req.Registry[entry.Name] = value
		r.written[entry.Name] = value
	}
	result := couchbaseResult{Registry: r.written, Objects: []configurationTemplate{}}
	for _, tmpl := range in.Templates {
		object, err := r.template(tmpl)
		if err != nil {
			return "", err
		}
		result.Objects = append(result.Objects, configurationTemplate{Name: tmpl.Name, Template: object, Singleton: tmpl.Singleton})
	}
	out, err := json.Marshal(result)
	if err != nil {
		return "", &RenderError{Kind: "exec", Message: err.Error()}
	}
	if int64(len(out)) > 2*req.Limits.MaxOutputBytes {
		return "", r.budget.overLimit()
	}
	return string(out), nil
}

// CheckCouchbase parses every dynamic attribute of the request's templates, snippets and registry entries
// without evaluating any (what `validate --templates` needs).
func CheckCouchbase(req *Request) error {
	var in couchbaseRequest
	raw, err := json.Marshal(req.Values)
	if err == nil {
		err = json.Unmarshal(raw, &in)
	}
	if err != nil {
		return &RenderError{Kind: "values", Message: fmt.Sprintf("not a couchbase template: %v", err)}
	}
	r := &couchbaseRender{req: in, limits: req.Limits}
	var check func(value any, where string) error
	check = func(value any, where string) error {
		switch v := value.(type) {
		case map[string]any:
			for key, item := range v {
				if err := check(item, where+"/"+escapePointer(key)); err != nil {
					return err
				}
			}
		case []any:
			for i, item := range v {
				if err := check(item, where+"/"+strconv.Itoa(i)); err != nil {
					return err
				}
			}
		case string:
			if !strings.HasPrefix(v, "{{") {
				return nil
			}
			if !strings.HasSuffix(v, "}}") {
				return &RenderError{Kind: "parse", Message: fmt.Sprintf("dynamic attribute at %s is malformed: it starts with {{ but does not end with }}", where)}
			}
			if _, err := template.New("attribute").Funcs(r.funcs()).Parse(v); err != nil {
				return &RenderError{Kind: "parse", Message: fmt.Sprintf("dynamic attribute at %s: %v", where, tidyTemplateError(err))}
			}
		}
		return nil
	}
	for _, entry := range in.RegistryEntries {
		if err := check(entry.Value, "registry."+entry.Name); err != nil {
			return err
		}
	}
	for _, tmpl := range in.Templates {
		if _, ok := tmpl.Template.(map[string]any); !ok {
			return &RenderError{Kind: "values", Template: tmpl.Name, Message: fmt.Sprintf("template %q: the resource template must be an object", tmpl.Name)}
		}
		if err := check(tmpl.Template, tmpl.Name); err != nil {
			return err
		}
	}
	for name, tmpl := range in.Snippets {
		if err := check(tmpl.Template, "snippet."+name); err != nil {
			return err
		}
	}
	return nil
}

// template renders one configuration template: its `template` must be an object.
func (r *couchbaseRender) template(tmpl configurationTemplate) (any, error) {
	if _, ok := tmpl.Template.(map[string]any); !ok {
		return nil, &RenderError{Kind: "values", Template: tmpl.Name, Message: fmt.Sprintf("template %q: the resource template must be an object", tmpl.Name)}
	}
	value, err := r.walk(tmpl.Template, tmpl.Name, "")
	if err != nil {
		var located *RenderError
		if re, ok := err.(*RenderError); ok {
			located = re
		} else {
			located = locate("exec", err)
		}
		if located.Template == "" || located.Template == "attribute" {
			located.Template = tmpl.Name
		}
		return nil, located
	}
	return value, nil
}

// walk renders every dynamic attribute under value; pointer is value's JSON pointer in template name.
func (r *couchbaseRender) walk(value any, name, pointer string) (any, error) {
	switch v := value.(type) {
	case map[string]any:
		out := make(map[string]any, len(v))
		keys := make([]string, 0, len(v))
		for key := range v {
			keys = append(keys, key)
		}
		sort.Strings(keys) // Couchbase's order is arbitrary; a fixed one keeps generated keys stable
		for _, key := range keys {
			item, err := r.walk(v[key], name, pointer+"/"+escapePointer(key))
			if err != nil {
				return nil, err
			}
			if item != nil {
				out[key] = item
			}
		}
		return out, nil
	case []any:
		out := make([]any, len(v))
		for i, item := range v {
			rendered, err := r.walk(item, name, pointer+"/"+strconv.Itoa(i))
			if err != nil {
				return nil, err
			}
			out[i] = rendered
		}
		return out, nil
	case string:
		return r.attribute(v, name+pointer)
	}
	return value, nil
}

func escapePointer(key string) string {
	return strings.ReplaceAll(strings.ReplaceAll(key, "~", "~0"), "/", "~1")
}

// attribute evaluates one string: literal unless it starts with "{{".
func (r *couchbaseRender) attribute(text, where string) (any, error) {
	if !strings.HasPrefix(text, "{{") {
		return text, nil
	}
	if !strings.HasSuffix(text, "}}") {
		return nil, &RenderError{Kind: "parse", Message: fmt.Sprintf("dynamic attribute at %s is malformed: it starts with {{ but does not end with }}", where)}
	}
	tmpl, err := template.New("attribute").Funcs(r.funcs()).Parse(text)
	if err != nil {
		return nil, &RenderError{Kind: "parse", Message: fmt.Sprintf("dynamic attribute at %s: %v", where, tidyTemplateError(err))}
	}
	jsonActions(tmpl.Root)
	savedWhere, savedCalls := r.where, r.calls
	r.where, r.calls = where, 0
	defer func() { r.where, r.calls = savedWhere, savedCalls }()
	w := r.budget.writer()
	if err := tmpl.Execute(w, nil); err != nil {
		inner := locate("exec", unwrapLimit(err))
		inner.Message = fmt.Sprintf("dynamic attribute at %s: %s", where, inner.Message)
		inner.Template, inner.Line, inner.Column = "", 0, 0
		return nil, inner
	}
	out := w.keep()
	var value any
	if err := json.Unmarshal([]byte(out), &value); err != nil {
		return nil, &RenderError{Kind: "exec", Message: fmt.Sprintf(
			"dynamic attribute at %s does not evaluate to one JSON value (%v); a dynamic attribute is a single template", where, err)}
	}
	return value, nil
}

var templatePrefix = regexp.MustCompile(`^template: attribute:\d+(?::\d+)?: `)

func tidyTemplateError(err error) string { return templatePrefix.ReplaceAllString(err.Error(), "") }

// jsonActions appends `| json` to every action that prints (an action without a variable declaration), in
// every branch, so the output is JSON text whose decoding keeps the value's type, as Couchbase does.
func jsonActions(node parse.Node) {
	switch n := node.(type) {
	case *parse.ListNode:
		if n == nil {
			return
		}
		for _, item := range n.Nodes {
			jsonActions(item)
		}
	case *parse.ActionNode:
		if n.Pipe != nil && len(n.Pipe.Decl) == 0 {
			n.Pipe.Cmds = append(n.Pipe.Cmds, &parse.CommandNode{NodeType: parse.NodeCommand, Args: []parse.Node{parse.NewIdentifier("json")}})
		}
	case *parse.IfNode:
		jsonActions(n.List)
		jsonActions(n.ElseList)
	case *parse.RangeNode:
		jsonActions(n.List)
		jsonActions(n.ElseList)
	case *parse.WithNode:
		jsonActions(n.List)
		jsonActions(n.ElseList)
	}
}

func (r *couchbaseRender) funcs() template.FuncMap {
	max := r.limits.MaxOutputBytes
	funcs := template.FuncMap{
		"registry":            r.registry,
		"parameter":           r.parameter,
		"snippet":             r.snippet,
		"list":                func(items ...any) []any { return items },
		"generatePassword":    r.generated(generatePassword),
		"generatePrivateKey":  r.generated(generatePrivateKey),
		"generateCertificate": r.generated(generateCertificate),
		"required":            required,
		"default":             defaultValue,
		"json":                toJSONStrict,
	}
	boundFuncs(funcs, max)
	funcs["json"] = guard("json", toJSONStrict, encoded, max)
	return funcs
}

func (r *couchbaseRender) registry(key string) (any, error) {
	value, ok := r.req.Registry[key]
	if !ok {
		return nil, nil
	}
	return value, nil
}

// parameter reads a request parameter by JSON pointer ("/a/b", "" for all) or by plain top-level name.
func (r *couchbaseRender) parameter(path string) (any, error) {
	var tokens []string
	switch {
	case path == "":
		return r.req.Parameters, nil
	case strings.HasPrefix(path, "/"):
		for _, token := range strings.Split(path[1:], "/") {
			tokens = append(tokens, strings.ReplaceAll(strings.ReplaceAll(token, "~1", "/"), "~0", "~"))
		}
	default:
		tokens = []string{path}
	}
	current := r.req.Parameters
	for _, token := range tokens {
		switch v := current.(type) {
		case map[string]any:
			next, ok := v[token]
			if !ok {
				return nil, nil
			}
			current = next
		case []any:
			index, err := strconv.Atoi(token)
			if err != nil || index < 0 || index >= len(v) {
				return nil, nil
			}
			current = v[index]
		default:
			return nil, nil
		}
	}
	return current, nil
}

func (r *couchbaseRender) snippet(name string) (any, error) {
	tmpl, ok := r.req.Snippets[name]
	if !ok {
		known := make([]string, 0, len(r.req.Snippets))
		for key := range r.req.Snippets {
			known = append(known, key)
		}
		sort.Strings(known)
		return nil, fmt.Errorf("snippet %q not found; the snippets are %v", name, known)
	}
	if r.depth >= maxSnippetDepth {
		return nil, &RenderError{Kind: "limit", Message: fmt.Sprintf("snippets nest deeper than %d (does snippet %q name itself?)", maxSnippetDepth, name)}
	}
	r.depth++
	defer func() { r.depth-- }()
	savedWhere, savedCalls := r.where, r.calls
	defer func() { r.where, r.calls = savedWhere, savedCalls }()
	if tmpl.Template == nil {
		return nil, fmt.Errorf("snippet %q has no template", name)
	}
	return r.walk(tmpl.Template, "snippet."+name, "")
}

// generated wraps a generator so that its n-th call in an attribute is made once and then read back from
// the registry under generatedKey.
func (r *couchbaseRender) generated(make func([]any) (string, error)) any {
	return func(args ...any) (any, error) {
		key := generatedKey(r.where, r.calls)
		r.calls++
		if value, ok := r.req.Registry[key]; ok {
			return value, nil
		}
		value, err := make(args)
		if err != nil {
			return nil, err
		}
		if int64(len(value)) > r.limits.MaxOutputBytes {
			return nil, limitError("generated value", int64(len(value)), r.limits.MaxOutputBytes)
		}
		r.req.Registry[key] = value
		r.written[key] = value
		return value, nil
	}
}

// invalidKeyChars are the characters a Secret's data key cannot hold (registries are stored in Secrets).
var invalidKeyChars = regexp.MustCompile(`[^-._a-zA-Z0-9]`)

// generatedKey names the registry key of the n-th generated value of the attribute at where
// ("template-name/json/pointer"): "generated.<template-name>.json.pointer.<n>", characters a Secret key
// cannot hold replaced by "_", hashed when longer than a Secret key may be.
func generatedKey(where string, n int) string {
	key := generatedPrefix + invalidKeyChars.ReplaceAllString(strings.ReplaceAll(where, "/", "."), "_") + "." + strconv.Itoa(n)
	if len(key) > 253 {
		sum := sha256.Sum256([]byte(where))
		key = generatedPrefix + hex.EncodeToString(sum[:16]) + "." + strconv.Itoa(n)
	}
	return key
}

func required(value any) (any, error) {
	if value == nil {
		return nil, fmt.Errorf("required value is nil")
	}
	return value, nil
}

// defaultValue returns value, or def when value is null (the documented intent of Couchbase's `default`).
func defaultValue(def, value any) any {
	if value == nil {
		return def
	}
	return value
}

func toJSONStrict(value any) (string, error) {
	out, err := json.Marshal(value)
	return string(out), err
}

// -- generators ---------------------------------------------------------------------------------------------

const passwordDictionary = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"

func argCount(name string, args []any, want int) error {
	if len(args) != want {
		return fmt.Errorf("%s takes %d arguments, got %d", name, want, len(args))
	}
	return nil
}

func asInt(name, what string, v any) (int64, error) {
	switch n := v.(type) {
	case int:
		return int64(n), nil
	case int64:
		return n, nil
	case float64:
		if n == float64(int64(n)) {
			return int64(n), nil
		}
	}
	return 0, fmt.Errorf("%s: %s must be an integer, got %v", name, what, v)
}

// generatePassword LENGTH DICTIONARY: every character drawn uniformly from the dictionary.
func generatePassword(args []any) (string, error) {
	if err := argCount("generatePassword", args, 2); err != nil {
		return "", err
	}
	length, err := asInt("generatePassword", "the length", args[0])
	if err != nil {
		return "", err
	}
	if length < 1 || length > maxPasswordLength {
		return "", &RenderError{Kind: "limit", Message: fmt.Sprintf("generatePassword: the length must be between 1 and %d, got %d", maxPasswordLength, length)}
	}
	dictionary := passwordDictionary
	if args[1] != nil {
		d, ok := args[1].(string)
		if !ok || d == "" {
			return "", fmt.Errorf("generatePassword: the dictionary must be a non-empty string or nil")
		}
		dictionary = d
	}
	letters := []rune(dictionary)
	limit := big.NewInt(int64(len(letters)))
	out := make([]rune, length)
	for i := range out {
		index, err := rand.Int(rand.Reader, limit)
		if err != nil {
			return "", err
		}
		out[i] = letters[index.Int64()]
	}
	return string(out), nil
}

// generatePrivateKey TYPE ENCODING BITS: a PEM private key.
func generatePrivateKey(args []any) (string, error) {
	if err := argCount("generatePrivateKey", args, 3); err != nil {
		return "", err
	}
	kind, _ := args[0].(string)
	encoding, _ := args[1].(string)
	var key crypto.PrivateKey
	var err error
	switch kind {
	case "RSA":
		if args[2] == nil {
			return "", fmt.Errorf("generatePrivateKey: an RSA key needs its bits")
		}
		bits, err := asInt("generatePrivateKey", "bits", args[2])
		if err != nil {
			return "", err
		}
		if bits < 1024 || bits > maxRSABits {
			return "", &RenderError{Kind: "limit", Message: fmt.Sprintf("generatePrivateKey: RSA bits must be between 1024 and %d, got %d", maxRSABits, bits)}
		}
		key, err = rsa.GenerateKey(rand.Reader, int(bits))
		if err != nil {
			return "", err
		}
	case "EllipticP224":
		key, err = ecdsa.GenerateKey(elliptic.P224(), rand.Reader)
	case "EllipticP256":
		key, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	case "EllipticP384":
		key, err = ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	case "EllipticP521":
		key, err = ecdsa.GenerateKey(elliptic.P521(), rand.Reader)
	case "ED25519":
		_, key, err = ed25519.GenerateKey(rand.Reader)
	default:
		return "", fmt.Errorf("generatePrivateKey: unknown key type %q (RSA, EllipticP224, EllipticP256, EllipticP384, EllipticP521 or ED25519)", kind)
	}
	if err != nil {
		return "", err
	}
	var block pem.Block
	switch encoding {
	case "PKCS#1":
		rsaKey, ok := key.(*rsa.PrivateKey)
		if !ok {
			return "", fmt.Errorf("generatePrivateKey: PKCS#1 encodes RSA keys only")
		}
		block = pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(rsaKey)}
	case "PKCS#8":
		der, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			return "", err
		}
		block = pem.Block{Type: "PRIVATE KEY", Bytes: der}
	case "SEC 1":
		ecKey, ok := key.(*ecdsa.PrivateKey)
		if !ok {
			return "", fmt.Errorf("generatePrivateKey: SEC 1 encodes elliptic keys only")
		}
		der, err := x509.MarshalECPrivateKey(ecKey)
		if err != nil {
			return "", err
		}
		block = pem.Block{Type: "EC PRIVATE KEY", Bytes: der}
	default:
		return "", fmt.Errorf("generatePrivateKey: unknown encoding %q (PKCS#1, PKCS#8 or SEC 1)", encoding)
	}
	return string(pem.EncodeToMemory(&block)), nil
}

func decodeKey(what string, text any) (crypto.Signer, error) {
	s, ok := text.(string)
	if !ok {
		return nil, fmt.Errorf("generateCertificate: %s is not a PEM string", what)
	}
	block, _ := pem.Decode([]byte(s))
	if block == nil {
		return nil, fmt.Errorf("generateCertificate: %s is not PEM", what)
	}
	var key any
	var err error
	switch block.Type {
	case "RSA PRIVATE KEY":
		key, err = x509.ParsePKCS1PrivateKey(block.Bytes)
	case "PRIVATE KEY":
		key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(block.Bytes)
	default:
		return nil, fmt.Errorf("generateCertificate: %s: unsupported PEM type %q", what, block.Type)
	}
	if err != nil {
		return nil, fmt.Errorf("generateCertificate: %s: %v", what, err)
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("generateCertificate: %s cannot sign", what)
	}
	return signer, nil
}

// generateCertificate KEY CN LIFETIME USAGE SANS CAKEY CACERT: a PEM certificate for KEY.
func generateCertificate(args []any) (string, error) {
	if err := argCount("generateCertificate", args, 7); err != nil {
		return "", err
	}
	key, err := decodeKey("the key", args[0])
	if err != nil {
		return "", err
	}
	if _, ok := key.(ed25519.PrivateKey); ok {
		return "", fmt.Errorf("generateCertificate: ED25519 keys cannot be used for X.509 certificates here")
	}
	cn, _ := args[1].(string)
	lifetimeText, _ := args[2].(string)
	lifetime, err := time.ParseDuration(lifetimeText)
	if err != nil || lifetime <= 0 || lifetime > maxLifetime {
		return "", fmt.Errorf("generateCertificate: the lifetime must be a positive Go duration of at most %s, got %q", maxLifetime, lifetimeText)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return "", err
	}
	now := time.Now()
	cert := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             now,
		NotAfter:              now.Add(lifetime),
		BasicConstraintsValid: true,
	}
	sans, _ := args[4].([]any)
	if args[4] != nil && sans == nil {
		return "", fmt.Errorf("generateCertificate: the SANs must be a list (list \"DNS:name\" ...) or nil")
	}
	for _, san := range sans {
		text, _ := san.(string)
		kind, name, ok := strings.Cut(text, ":")
		switch {
		case ok && kind == "DNS":
			cert.DNSNames = append(cert.DNSNames, name)
		case ok && kind == "EMAIL":
			cert.EmailAddresses = append(cert.EmailAddresses, name)
		default:
			return "", fmt.Errorf("generateCertificate: SAN %v is not DNS:<name> or EMAIL:<address>", san)
		}
	}
	switch usage, _ := args[3].(string); usage {
	case "CA":
		cert.IsCA = true
		cert.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageCRLSign
	case "Server":
		cert.KeyUsage = x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment
		cert.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	case "Client":
		cert.KeyUsage = x509.KeyUsageDigitalSignature
		cert.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	default:
		return "", fmt.Errorf("generateCertificate: unknown usage %q (CA, Server or Client)", usage)
	}
	parent, signer := cert, key
	if args[5] != nil || args[6] != nil {
		signer, err = decodeKey("the CA key", args[5])
		if err != nil {
			return "", err
		}
		caText, _ := args[6].(string)
		block, _ := pem.Decode([]byte(caText))
		if block == nil || block.Type != "CERTIFICATE" {
			return "", fmt.Errorf("generateCertificate: the CA certificate is not a PEM certificate")
		}
		if parent, err = x509.ParseCertificate(block.Bytes); err != nil {
			return "", fmt.Errorf("generateCertificate: the CA certificate: %v", err)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, cert, parent, key.Public(), signer)
	if err != nil {
		return "", fmt.Errorf("generateCertificate: %v", err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})), nil
}
