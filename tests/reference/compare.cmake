# Runs nibble and a node reference over the same inputs and requires identical output lines.
#   KIND=tokenize: NIBBLE tokenize --model MODEL --jsonl [--no-special]  vs  node encode.mjs MODEL
#   KIND=chat:     TOOL TEMPLATE EXTRA_JSON                              vs  node render_chat.mjs TEMPLATE EXTRA_JSON
#                  TEMPLATE_MODEL=<Ollama model> instead of TEMPLATE: the model's real chat template from
#                  @huggingface/ollama-utils (ollama_template.mjs), written to WORK/template.jinja.
#                  TEMPLATE=- : each INPUT line carries its own template (the Jinja feature cases).
# Inputs: INPUT (a JSONL file) or RANDOM_COUNT (gen_strings.mjs: the hand-picked cases + that many
# seeded random strings). Other variables: NODE, REF_DIR (tests/reference), WORK (scratch folder).
foreach(var KIND NODE REF_DIR WORK)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "compare.cmake: ${var} is not set")
  endif()
endforeach()
if(NOT EXISTS ${REF_DIR}/node_modules/@huggingface/tokenizers OR NOT EXISTS ${REF_DIR}/node_modules/@huggingface/jinja
   OR NOT EXISTS ${REF_DIR}/node_modules/@huggingface/ollama-utils)
  message(FATAL_ERROR "The npm reference packages are missing: run `npm ci` in ${REF_DIR} (CI does this in .ci/run).")
endif()
file(MAKE_DIRECTORY ${WORK})
if(DEFINED TEMPLATE_MODEL)
  set(TEMPLATE ${WORK}/template.jinja)
  execute_process(COMMAND ${NODE} ${REF_DIR}/ollama_template.mjs ${TEMPLATE_MODEL} OUTPUT_FILE ${TEMPLATE}
                  RESULT_VARIABLE rc ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "ollama_template.mjs ${TEMPLATE_MODEL} failed: ${err}")
  endif()
endif()
if(KIND STREQUAL "tokenize")
  set(special_flag "")
  if(NO_SPECIAL)
    set(special_flag "--no-special")
  endif()
  set(nibble_cmd ${NIBBLE} tokenize --model ${MODEL} --jsonl ${special_flag})
  set(ref_cmd ${NODE} ${REF_DIR}/encode.mjs ${MODEL} ${special_flag})
elseif(KIND STREQUAL "chat")
  if(NOT DEFINED EXTRA)
    set(EXTRA "{}")
  endif()
  set(nibble_cmd ${TOOL} ${TEMPLATE} ${EXTRA})
  set(ref_cmd ${NODE} ${REF_DIR}/render_chat.mjs ${TEMPLATE} ${EXTRA})
else()
  message(FATAL_ERROR "compare.cmake: unknown KIND ${KIND}")
endif()
set(input ${WORK}/input.jsonl)
if(DEFINED RANDOM_COUNT)
  execute_process(COMMAND ${NODE} ${REF_DIR}/gen_strings.mjs ${RANDOM_COUNT} 1234 OUTPUT_FILE ${input}
                  RESULT_VARIABLE rc ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "gen_strings.mjs failed: ${err}")
  endif()
else()
  configure_file(${INPUT} ${input} COPYONLY)
endif()
execute_process(COMMAND ${ref_cmd} INPUT_FILE ${input} OUTPUT_FILE ${WORK}/expected.jsonl
                WORKING_DIRECTORY ${REF_DIR} RESULT_VARIABLE rc ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "node reference failed (${rc}): ${err}")
endif()
execute_process(COMMAND ${nibble_cmd} INPUT_FILE ${input} OUTPUT_FILE ${WORK}/actual.jsonl
                RESULT_VARIABLE rc ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "nibble failed (${rc}): ${err}")
endif()
execute_process(COMMAND ${NODE} ${REF_DIR}/diff_jsonl.mjs ${input} ${WORK}/expected.jsonl ${WORK}/actual.jsonl ${KIND}
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${KIND} results differ from the reference (files in ${WORK})")
endif()
