/** The README's ```ts / ```typescript blocks, each with the line its code starts on. */
export const readmeBlocks = (markdown: string): Array<{ line: number; code: string }> => {
  const blocks: Array<{ line: number; code: string }> = []
  const lines = markdown.split("\n")
  for (let i = 0; i < lines.length; i++) {
    if (!/^```(ts|typescript)\s*$/.test(lines[i]!)) continue
    const start = i + 1
    let end = start
    while (end < lines.length && !lines[end]!.startsWith("```")) end++
    blocks.push({ line: start + 1, code: lines.slice(start, end).join("\n") })
    i = end
  }
  return blocks
}
