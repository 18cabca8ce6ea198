// Validates Prometheus Operator objects (JSON array on stdin) against the CRD schemas that
// npm's @kubernetes-models/prometheus-operator generates validators from.
// Usage: node tests/deploy_validate_crds.mjs NODE_MODULES_DIR < objects.json
// Prints one line per object; exits 1 when any object is invalid or of an unknown kind.
import { readFileSync } from "node:fs";
import { pathToFileURL } from "node:url";
import { join } from "node:path";

const modules = process.argv[2];
if (!modules) {
  console.error("usage: node deploy_validate_crds.mjs NODE_MODULES_DIR < objects.json");
  process.exit(2);
}
const objects = JSON.parse(readFileSync(0, "utf8"));
let failed = 0;
for (const obj of objects) {
  const [group, version] = String(obj.apiVersion).split("/");
  const name = `${obj.kind}/${obj.metadata?.name}`;
  const file = join(modules, "@kubernetes-models/prometheus-operator", group, version, `${obj.kind}.js`);
  let Model;
  try {
    Model = (await import(pathToFileURL(file).href))[obj.kind];
  } catch (e) {
    console.log(`FAIL ${name}: no model for ${obj.apiVersion} ${obj.kind} (${e.message})`);
    failed++;
    continue;
  }
  try {
    new Model(obj).validate();
    console.log(`ok ${name}`);
  } catch (e) {
    console.log(`FAIL ${name}: ${e.message}`);
    failed++;
  }
}
process.exit(failed ? 1 : 0);
