// Judges objects as the API server would admit them through crds/benchmarkrun.yaml, with real
// third-party evaluators: the structural schema through a JSON-schema validator
// (@cfworker/json-schema) and every x-kubernetes-validations rule through a CEL implementation
// (@marcbachmann/cel-js). What the API server does around them is done here the way it does it:
// nulls pruned, defaults applied, unknown fields refused (kubectl's strict field validation),
// ObjectMeta checked by its own built-in rules, CEL values typed from the schema (integers as
// int64), transition rules (oldSelf) skipped on create, list-type set/map uniqueness.
//
// Usage: node evaluate_crd.mjs NODE_MODULES_DIR (scripts/install-node-tools.sh fills it)
// Input on stdin: {"crd": <the CRD as JSON>, "objects": [...]}.
// Output on stdout: [{"accepted": bool, "errors": ["path: message", ...]}, ...]
import {readFileSync} from 'node:fs'
import {join} from 'node:path'
import {pathToFileURL} from 'node:url'

// A package's ESM entry point, from its package.json "exports".
async function load(name) {
  const dir = join(process.argv[2], name)
  let entry = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')).exports['.']
  while (typeof entry === 'object') entry = entry.import ?? entry.default
  return import(pathToFileURL(join(dir, entry)).href)
}
const {Validator} = await load('@cfworker/json-schema')
const {evaluate} = await load('@marcbachmann/cel-js')

const input = JSON.parse(readFileSync(0, 'utf8'))
const version = input.crd.spec.versions.find((v) => v.storage)
const root = version.schema.openAPIV3Schema

const QUALIFIED = '^([a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$'
const LABEL_VALUE = '^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$'
const DNS_LABEL = '^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$'
const keySchema = {type: 'string', maxLength: 317, pattern: QUALIFIED, not: {pattern: '^[^/]{254,}/'}}
// ObjectMeta as the API server validates it for every object (apimachinery's ValidateObjectMeta).
const objectMeta = {
  type: 'object',
  additionalProperties: false,
  properties: {
    name: {type: 'string'}, generateName: {type: 'string'},
    namespace: {type: 'string', maxLength: 63, pattern: DNS_LABEL},
    selfLink: {type: 'string'}, uid: {type: 'string'}, resourceVersion: {type: 'string'},
    generation: {type: 'integer'}, creationTimestamp: {}, deletionTimestamp: {},
    deletionGracePeriodSeconds: {type: 'integer'},
    labels: {type: 'object', propertyNames: keySchema, additionalProperties: {type: 'string', maxLength: 63, pattern: LABEL_VALUE}},
    annotations: {type: 'object', propertyNames: keySchema, additionalProperties: {type: 'string'}},
    ownerReferences: {type: 'array'}, finalizers: {type: 'array'}, managedFields: {type: 'array'},
  },
}

// OpenAPI v3 (as CRDs write it) to JSON Schema 2020-12, strict about unknown fields.
function toJsonSchema(s, path) {
  const out = {}
  for (const k of ['type', 'enum', 'minimum', 'maximum', 'minLength', 'maxLength', 'pattern', 'minItems', 'maxItems',
    'minProperties', 'maxProperties', 'required']) {
    if (s[k] !== undefined) out[k] = s[k]
  }
  if (s.exclusiveMinimum === true) { out.exclusiveMinimum = s.minimum; delete out.minimum }
  if (s.exclusiveMaximum === true) { out.exclusiveMaximum = s.maximum; delete out.maximum }
  if (s['x-kubernetes-list-type'] === 'set') out.uniqueItems = true
  if (s.properties) {
    out.properties = {}
    for (const [k, v] of Object.entries(s.properties)) out.properties[k] = toJsonSchema(v, `${path}.${k}`)
  }
  if (s.additionalProperties) out.additionalProperties = toJsonSchema(s.additionalProperties, `${path}.*`)
  else if (s.type === 'object' && !s['x-kubernetes-preserve-unknown-fields']) out.additionalProperties = false
  if (s.items) out.items = toJsonSchema(s.items, `${path}[]`)
  if (path === '.metadata') {
    const meta = structuredClone(objectMeta)
    Object.assign(meta.properties.name, out.properties?.name ?? {})
    return meta
  }
  return out
}

// The schema of a property: declared, or the additionalProperties schema of a map.
function childSchema(s, key) {
  return s?.properties?.[key] ?? (typeof s?.additionalProperties === 'object' ? s.additionalProperties : undefined)
}

// The API server prunes nulls of non-nullable fields, then applies defaults, before validating.
function pruneAndDefault(value, s) {
  if (Array.isArray(value)) {
    return value.filter((v) => v !== null).map((v) => (s?.items ? pruneAndDefault(v, s.items) : v))
  }
  if (value === null || typeof value !== 'object') return value
  const out = {}
  for (const [k, v] of Object.entries(value)) {
    if (v === null) continue
    const child = childSchema(s, k)
    out[k] = child ? pruneAndDefault(v, child) : v
  }
  for (const [k, child] of Object.entries(s?.properties ?? {})) {
    if (out[k] === undefined && child.default !== undefined) out[k] = pruneAndDefault(structuredClone(child.default), child)
  }
  return out
}

// list-type map: entries unique by their keys.
function mapListErrors(value, s, path, errors) {
  if (value === null || typeof value !== 'object') return
  if (Array.isArray(value)) {
    if (s['x-kubernetes-list-type'] === 'map') {
      const seen = new Map()
      value.forEach((item, i) => {
        const key = JSON.stringify(s['x-kubernetes-list-map-keys'].map((k) => item?.[k]))
        if (seen.has(key)) errors.push(`${path}[${i}]: Duplicate value: ${key} (also at [${seen.get(key)}])`)
        else seen.set(key, i)
      })
    }
    if (s.items) value.forEach((item, i) => mapListErrors(item, s.items, `${path}[${i}]`, errors))
    return
  }
  for (const [k, v] of Object.entries(value)) {
    const child = childSchema(s, k)
    if (child) mapListErrors(v, child, `${path}.${k}`, errors)
  }
}

// CEL sees integers typed as int64 (BigInt here), numbers as double.
function celValue(value, s) {
  if (Array.isArray(value)) return value.map((v) => celValue(v, s?.items))
  if (value !== null && typeof value === 'object') {
    const out = {}
    for (const [k, v] of Object.entries(value)) {
      const child = childSchema(s, k)
      out[k] = celValue(v, child)
    }
    return out
  }
  if (typeof value === 'number' && s?.type === 'integer' && Number.isInteger(value)) return BigInt(value)
  return value
}

function celErrors(value, s, path, errors) {
  if (value === undefined || s === undefined) return
  for (const rule of s['x-kubernetes-validations'] ?? []) {
    if (/\boldSelf\b/.test(rule.rule)) continue  // a transition rule: nothing old on create
    let ok
    try {
      ok = evaluate(rule.rule, {self: celValue(value, s)}) === true
    } catch (e) {
      errors.push(`${path}: CEL error in "${rule.rule}": ${e.message}`)
      continue
    }
    if (!ok) errors.push(`${path}: ${rule.message ?? rule.rule}`)
  }
  if (Array.isArray(value)) {
    if (s.items) value.forEach((v, i) => celErrors(v, s.items, `${path}[${i}]`, errors))
  } else if (value !== null && typeof value === 'object') {
    for (const [k, v] of Object.entries(value)) {
      const child = childSchema(s, k)
      celErrors(v, child, `${path}.${k}`, errors)
    }
  }
}

const validator = new Validator(toJsonSchema(root, ''), '2020-12', false)
const verdicts = input.objects.map((object) => {
  const errors = []
  const prepared = pruneAndDefault(object, root)
  const schema = validator.validate(prepared)
  if (!schema.valid) {
    for (const e of schema.errors) {
      if (e.error === 'False boolean schema.' || ['properties', 'items', 'allOf'].includes(e.keyword)) continue
      errors.push(`${e.instanceLocation}: ${e.error}`)
    }
    if (errors.length === 0) errors.push(schema.errors[0].error)
  }
  mapListErrors(prepared, root, '', errors)
  celErrors(prepared, root, '', errors)
  return {accepted: errors.length === 0, errors}
})
process.stdout.write(JSON.stringify(verdicts))
