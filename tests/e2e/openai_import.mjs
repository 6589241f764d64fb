// The pinned openai npm package (tools/js), for the e2e tests that drive onecard with the official
// client. Where it is not installed the calling test exits 77, ctest's SKIP_RETURN_CODE, so the
// skip shows as skipped, with the reason.
import path from 'node:path';
import { createRequire } from 'node:module';
import { fileURLToPath, pathToFileURL } from 'node:url';

const repo = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');

export async function importOpenAIOrSkip() {
  const require = createRequire(path.join(repo, 'tools', 'js', 'package.json'));
  try {
    const mod = await import(pathToFileURL(require.resolve('openai')).href);
    return mod.OpenAI ?? mod.default?.OpenAI ?? mod.default;
  } catch (e) {
    console.log(`SKIP: the openai npm package is not installed (run scripts/setup.sh): ${e.message}`);
    process.exit(77);
  }
}
