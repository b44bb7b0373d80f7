from llmb.cli import main

main()
