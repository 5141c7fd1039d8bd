"""Source text of the user's files, read and edited: the lines a fix rewrites, the one paste rule, which
files are the user's. It sits below everything that decides *what* to edit (causes, remedies, patching),
so each of them can ask it *how*, and it imports nothing of the package's own."""
