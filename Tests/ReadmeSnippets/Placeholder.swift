// The ReadmeSnippets target: scripts/readme-snippets.sh writes every ```swift block of
// README.md into Generated/ here (git ignores that folder), builds this target against
// Porter's modules, and removes them again. This file keeps the target buildable
// meanwhile. A README block that imports a module this target does not depend on
// needs that module added to its dependencies in Package.swift.
