// Marks dist/cjs as CommonJS: the package is "type": "module", so without this
// Node would read the CommonJS build's .js files as ES modules.
import { writeFileSync } from "node:fs";

writeFileSync(new URL("../dist/cjs/package.json", import.meta.url), JSON.stringify({ type: "commonjs" }) + "\n");
