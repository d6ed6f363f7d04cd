"""What every page shares: the sidebar, the page list, URL state, keyed sections, the page's shape,
the memos and cached runs, the lesson bar and classes. Imports core/ and nothing of the page packages.
"""
